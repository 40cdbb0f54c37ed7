/** A finished check, as the CI report sees it. */
export interface CaseOutcome {
  capability: string;
  environment: string;
  caseName: string;
  /** `skipped`: the capability is not portable to that environment. */
  status: 'passed' | 'failed' | 'error' | 'skipped';
  /** Why it failed / errored. */
  message?: string | undefined;
  /**
   * The contract a failed case broke: `expect.stdout`/`contains`/`json`, `exitCode`, `outputSchema`,
   * `inputSchema`, `limits.*`, `grants.network`, `permission` (the gate denied the run), `cases.json`.
   * The JUnit failure's `type`.
   */
  contract?: string | undefined;
  /** It failed because the gate denied the run (the message names the key): a grant is missing, not a fix. */
  denied?: true | undefined;
  durationMs: number;
  stdout?: string | undefined;
  stderr?: string | undefined;
}

// XML 1.0 forbids most control characters even when escaped; drop them.
// eslint-disable-next-line no-control-regex
const INVALID_XML = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/g;

export function xmlEscape(text: string): string {
  return text
    .replace(INVALID_XML, '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

const seconds = (ms: number): string => (ms / 1000).toFixed(3);

/**
 * Pure: JUnit XML with one testsuite per capability and one testcase per case and environment.
 * Written by hand on purpose: the report is three element kinds and an escape, and an XML or JUnit
 * library would be a dependency the CLI loads for a string this size (tests parse it with a real one).
 */
export function renderJunit(outcomes: readonly CaseOutcome[], name = 'capsule ci'): string {
  const suites = new Map<string, CaseOutcome[]>();
  for (const o of outcomes) {
    const list = suites.get(o.capability) ?? [];
    list.push(o);
    suites.set(o.capability, list);
  }
  const count = (list: readonly CaseOutcome[], status: CaseOutcome['status']): number =>
    list.filter((o) => o.status === status).length;
  const total = (list: readonly CaseOutcome[]): number => list.reduce((s, o) => s + o.durationMs, 0);

  let xml = '<?xml version="1.0" encoding="UTF-8"?>\n';
  xml += `<testsuites name="${xmlEscape(name)}" tests="${outcomes.length}" failures="${count(outcomes, 'failed')}" errors="${count(outcomes, 'error')}" skipped="${count(outcomes, 'skipped')}" time="${seconds(total(outcomes))}">\n`;
  for (const [capability, list] of suites) {
    xml += `  <testsuite name="${xmlEscape(capability)}" tests="${list.length}" failures="${count(list, 'failed')}" errors="${count(list, 'error')}" skipped="${count(list, 'skipped')}" time="${seconds(total(list))}">\n`;
    for (const o of list) {
      xml += `    <testcase classname="${xmlEscape(`${capability}.${o.environment}`)}" name="${xmlEscape(`${o.caseName} [${o.environment}]`)}" time="${seconds(o.durationMs)}"`;
      if (o.status === 'passed') {
        xml += ' />\n';
        continue;
      }
      if (o.status === 'skipped') {
        xml += `>\n      <skipped message="${xmlEscape(o.message ?? '')}" />\n    </testcase>\n`;
        continue;
      }
      const tag = o.status === 'failed' ? 'failure' : 'error';
      const type = o.contract !== undefined ? ` type="${xmlEscape(o.contract)}"` : '';
      xml += `>\n      <${tag}${type} message="${xmlEscape((o.message ?? '').slice(0, 1000))}">${xmlEscape(o.message ?? '')}</${tag}>\n`;
      if (o.stdout) xml += `      <system-out>${xmlEscape(o.stdout.slice(0, 64 * 1024))}</system-out>\n`;
      if (o.stderr) xml += `      <system-err>${xmlEscape(o.stderr.slice(0, 64 * 1024))}</system-err>\n`;
      xml += '    </testcase>\n';
    }
    xml += '  </testsuite>\n';
  }
  xml += '</testsuites>\n';
  return xml;
}
