/*
 * Grants and rules that can never match anything (docs/permissions.md, "Grants and rules that can never
 * match"): a tool that never asks, a capability name no manifest can have, a path outside the project,
 * an allow rule whose program is a pattern. Refused where they are written (a flag: USAGE; a file:
 * CONFIG_INVALID naming the file and field), never accepted in silence. Pure; light enough for config/.
 */
import { CAPABILITY_NAME } from './key-syntax.js';
import { ENVIRONMENTS } from './environments.js';
import { hasGlobMeta, matchRuleGlob } from '../base/glob.js';

/** Tools whose keys the gate decides on (the `tool` of `tool:action`). */
export const KEY_TOOLS: readonly string[] = [
  'run_command',
  'run_capability',
  'write_file',
  'generate_capability',
];

/**
 * Names a rule's `Tool` may take: a key's tool, or the name of an agent tool that asks for one
 * (`edit_file` asks for write_file keys, `generate_shell_capability` for generate_capability:shell).
 * Tools that never ask (read_file, glob, grep …) are never judged by a rule.
 */
export const RULE_TOOLS: readonly string[] = [
  ...KEY_TOOLS,
  'edit_file',
  'generate_shell_capability',
  'generate_wasm_capability',
  'generate_docker_capability',
];

/** Why it can never match, and what would. */
export interface NeverMatches {
  why: string;
  hint: string;
}

/** The subject of write_file / edit_file is a path relative to the project root, `/`-separated. */
function outsideProject(pattern: string): boolean {
  return (
    pattern.startsWith('/') ||
    pattern === '~' ||
    pattern.startsWith('~/') ||
    pattern.startsWith('./') ||
    /(^|\/)\.\.(\/|$)/.test(pattern)
  );
}

/** Closest names first (edit distance), for "did you mean". */
export function closestNames(name: string, names: readonly string[], max = 3): string[] {
  const distance = (a: string, b: string): number => {
    const row = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
      let prev = row[0] as number;
      row[0] = i;
      for (let j = 1; j <= b.length; j++) {
        const here = row[j] as number;
        row[j] = Math.min(here + 1, (row[j - 1] as number) + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
        prev = here;
      }
    }
    return row[b.length] as number;
  };
  const limit = Math.max(2, Math.floor(name.length / 2));
  return names
    .map((n) => ({ n, d: distance(name.toLowerCase(), n.toLowerCase()) }))
    .filter((x) => x.d <= limit || x.n.startsWith(name) || name.startsWith(x.n))
    .sort((a, b) => a.d - b.d || a.n.localeCompare(b.n))
    .slice(0, max)
    .map((x) => x.n);
}

/** A `--grant` key (or project allowlist key) that no request can ever carry. */
export function grantNeverMatches(tool: string, action: string): NeverMatches | undefined {
  if (!KEY_TOOLS.includes(tool)) {
    const near = closestNames(tool, KEY_TOOLS, 1);
    return {
      why: `${tool} is not a tool capsule asks about, so no call ever has a ${tool}: key`,
      hint: `Keys name one of ${KEY_TOOLS.join(', ')}${near.length > 0 ? ` (did you mean ${near[0]}:${action}?)` : ''}.`,
    };
  }
  if (action === '*') return undefined;
  const exact = action.endsWith(':*') ? action.slice(0, -2) : action;
  switch (tool) {
    case 'run_capability':
      if (hasGlobMeta(exact))
        return {
          why: 'a grant names one capability exactly; a pattern in it never matches',
          hint: 'Grant each capability (run_capability:hello) or all of them (run_capability:*); a rule run_capability(hel*) in capsule.json takes a pattern.',
        };
      if (!CAPABILITY_NAME.test(exact))
        return CAPABILITY_NAME.test(exact.toLowerCase())
          ? {
              why: 'capability names are lower case',
              hint: `Did you mean run_capability:${exact.toLowerCase()}?`,
            }
          : {
              why: `"${exact}" is not a capability name (1-64 characters of a-z, 0-9, "-" or "_")`,
              hint: 'Name a capability as capsule list shows it, e.g. run_capability:hello.',
            };
      return undefined;
    case 'generate_capability': {
      // ENV (write a new capability), or ENV:replace:NAME (replace the capability NAME), ENV:replace:*.
      const [env, replace, name, ...rest] = exact.split(':');
      const replaceOk =
        replace === undefined ||
        (replace === 'replace' &&
          rest.length === 0 &&
          (name === undefined ? action.endsWith(':*') : CAPABILITY_NAME.test(name)));
      if (!(ENVIRONMENTS as readonly string[]).includes(env ?? '') || !replaceOk)
        return {
          why: `generate_capability keys name an environment (and, to replace a capability, ENV:replace:NAME), and "${exact}" is neither`,
          hint: `Use one of ${ENVIRONMENTS.map((e) => `generate_capability:${e}`).join(', ')}, or e.g. generate_capability:shell:replace:hello.`,
        };
      return undefined;
    }
    case 'write_file':
      if (outsideProject(action))
        return {
          why: `write_file keys are paths relative to the project root, and "${action}" is not one (the file tools never write outside the project)`,
          hint: 'Name the path as seen from the project root, e.g. write_file:src/** or write_file:docs/notes.md.',
        };
      return undefined;
    default:
      return undefined;
  }
}

/**
 * A rule (`Tool(glob)`) that can never match a call. Allow rules for run_command name their program
 * literally (`run_command(gi* *)` would allow nothing); deny rules may use a pattern there.
 */
export function ruleNeverMatches(
  kind: 'allow' | 'deny',
  tool: string,
  pattern: string | undefined,
): NeverMatches | undefined {
  if (!RULE_TOOLS.includes(tool)) {
    const near = closestNames(tool, RULE_TOOLS, 1);
    return {
      why: `${tool} is not a tool that asks for permission, so no call is ever judged by the rule`,
      hint: `Rules name one of ${RULE_TOOLS.join(', ')}${near.length > 0 ? ` (did you mean ${near[0]}?)` : ''}.`,
    };
  }
  if (pattern === undefined) return undefined;
  if (tool === 'run_command') {
    const program = /^(?:\\[\s\S]|[^\s\\])*/.exec(pattern)?.[0] ?? pattern;
    if (kind === 'allow' && pattern !== '*' && hasGlobMeta(program))
      return {
        why: `an allow rule names its program literally, and "${program}" is a pattern: the rule allows nothing`,
        hint: 'Name the program literally, e.g. run_command(git *); run_command(*) means every simple command (a deny rule may use a pattern).',
      };
    if (pattern.trim() === '')
      return { why: 'the pattern is empty', hint: 'Write run_command(git *) or a bare run_command.' };
    return undefined;
  }
  if (tool === 'write_file' || tool === 'edit_file') {
    if (outsideProject(pattern))
      return {
        why: `${tool} calls are judged on paths relative to the project root, and "${pattern}" is outside it`,
        hint: `Name paths from the project root, e.g. ${tool}(src/**).`,
      };
    return undefined;
  }
  if (tool === 'generate_capability' && !ENVIRONMENTS.some((e) => matchRuleGlob(pattern, e)))
    return {
      why: `generate_capability calls are judged on their environment, and "${pattern}" matches none`,
      hint: `Environments: ${ENVIRONMENTS.join(', ')}.`,
    };
  if (tool === 'run_capability') {
    // Without its wildcards the pattern must still spell a capability name.
    const letters = pattern.replace(/\\(.)/g, '$1').replace(/\[[^\]]*\]|[*?]/g, '');
    if (/[^a-z0-9_-]/.test(letters))
      return {
        why: `capability names are 1-64 characters of a-z, 0-9, "-" or "_", so "${pattern}" matches none`,
        hint: /[A-Z]/.test(letters)
          ? `Capability names are lower case: run_capability(${pattern.toLowerCase()}).`
          : 'Name capabilities as capsule list shows them, e.g. run_capability(hello) or run_capability(img-*).',
      };
  }
  return undefined;
}
