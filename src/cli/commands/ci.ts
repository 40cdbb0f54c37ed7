import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import type { CaseOutcome } from '../../ci/junit.js';
import { CapsuleError } from '../../base/errors.js';
import { EXIT } from '../exit-codes.js';
import { addEngineFlag, addGateFlags, type GateFlags } from '../flags.js';
import { action, json, write, type CliIO } from '../output.js';
import { reportTarget, writeReport } from '../report-file.js';
import { parseEnvs } from '../args.js';
import { shellWord } from '../../base/shell-quote.js';

const MARKS: Record<CaseOutcome['status'], string> = {
  passed: 'PASS ',
  failed: 'FAIL ',
  error: 'ERROR',
  skipped: 'SKIP ',
};

/**
 * 0 when every check passed; 1 when a check failed or errored on its own (a broken capability or runner
 * outranks a missing grant: granting would not make it pass); 77 when the only failures are denials.
 */
function ciExitCode(outcomes: readonly CaseOutcome[]): number {
  const bad = outcomes.filter((o) => o.status === 'failed' || o.status === 'error');
  if (bad.length === 0) return EXIT.OK;
  return bad.every((o) => o.denied === true) ? EXIT.DENIED : EXIT.FAILURE;
}

/**
 * One summary of every denial, instead of the denial's whole text per case: how many, which keys, and
 * the flags that allow exactly those keys.
 */
export function deniedSummary(outcomes: readonly CaseOutcome[]): string {
  const denied = outcomes.filter((o) => o.denied === true);
  if (denied.length === 0) return '';
  const keys = [...new Set(denied.map((o) => `run_capability:${o.capability}`))];
  const flags = keys.map((k) => `--grant ${shellWord(k)}`).join(' ');
  return (
    `${denied.length} case${denied.length === 1 ? '' : 's'} denied: ${keys.join(', ')} — grant with --grant KEY (sandboxed ones also in capsule.json)\n` +
    `  to allow them: ${flags}\n`
  );
}

/**
 * One case's line. A denial's reason is the same for every case (the summary says it once), and so is an
 * error that stops every case alike (no engine, a runner missing): said in full once, then referred to.
 */
export function caseLine(o: CaseOutcome, said: Set<string>): string {
  let first = o.denied === true ? 'denied' : o.message?.split('\n')[0];
  if (first !== undefined && o.denied !== true) {
    if (said.has(first)) first = 'the same as above';
    else said.add(first);
  }
  const why = first ? ` — ${first}` : '';
  return `${MARKS[o.status]} ${o.capability} / ${o.caseName} [${o.environment}] ${o.durationMs.toFixed(0)} ms${why}`;
}

type CiOptions = GateFlags & { env?: string; junit?: string; force?: boolean; json?: boolean };

export function registerCi(program: Command, io: CliIO): void {
  addGateFlags(
    addEngineFlag(
      program
        .command('ci')
        .description(
          "Run every capability's checks (cases.json beside capability.json) non-interactively.\n" +
            'Ask is a denial unless granted with --grant: one summary line names the denied keys.',
        )
        .argument('[path]', 'a folder of capabilities (default: the project roots)')
        .option(
          '--env <list>',
          'run each case in these environments where the capability is portable (default: its own)',
        )
        .option('--junit <file>', 'write a JUnit XML report (one testcase per case and environment)')
        .option('--force', 'overwrite an existing --junit file')
        .option('--json', 'print the outcomes as JSON'),
    ),
  ).action(
    action(io, async (target: string | undefined, opts: CiOptions) => {
      const environments = opts.env === undefined ? undefined : parseEnvs(opts.env);
      const junitFile = await reportTarget(io.cwd, opts.junit, '--junit', opts.force === true);
      const [{ renderJunit }, { runCases }, { writeFileAtomic }, { openSession, cliRegistry }] =
        await Promise.all([
          import('../../ci/junit.js'),
          import('../../ci/run-cases.js'),
          import('../../base/atomic-write.js'),
          import('../session.js'),
        ]);
      const tty = (io.stderr as { isTTY?: boolean }).isTTY === true && !opts.json;
      // CI never prompts: Ask is a denial unless granted up front.
      const session = await openSession(
        { ...io, interactive: false },
        {
          grants: opts.grant,
          grantFor: opts.grantFor,
          noPrompt: true,
          mode: opts.mode,
          engine: opts.engine,
          command: 'ci',
          json: opts.json,
        },
      );
      try {
        // PATH is a folder of capabilities, or one capability's folder (its checks alone).
        const folder = target === undefined ? undefined : path.resolve(io.cwd, target);
        const one = folder !== undefined && existsSync(path.join(folder, 'capability.json'));
        const registry =
          folder === undefined
            ? session.registry
            : cliRegistry(io, session.project.root, [one ? path.dirname(folder) : folder]);
        const scan = await registry.scan();
        if (target !== undefined && scan.missingRoots.length > 0) {
          throw new CapsuleError('NOT_FOUND', `${scan.missingRoots.join(', ')} does not exist.`);
        }
        const inFolder = (file: string): boolean => !one || path.dirname(file) === folder;
        const said = new Set<string>();
        const checks = await runCases({
          executor: session.executor,
          capabilities: scan.capabilities.filter((c) => inFolder(c.manifestPath)),
          invalid: scan.invalid.filter((i) => !one || i.folder === folder),
          environments,
          onOutcome: (o) => {
            if (opts.json) return;
            const text = caseLine(o, said);
            // On a terminal, passes update one status line and only problems stay; elsewhere, a line each.
            if (!tty) void write(io.stderr, `${text}\n`);
            else void write(io.stderr, `\r\x1b[K${text}${o.status === 'passed' ? '' : '\n'}`);
          },
        });
        if (tty) await write(io.stderr, '\r\x1b[K');
        const count = (status: CaseOutcome['status']): number =>
          checks.outcomes.filter((o) => o.status === status).length;
        const [passed, failed, errors, skipped] = [
          count('passed'),
          count('failed'),
          count('error'),
          count('skipped'),
        ];
        if (junitFile !== undefined) {
          await writeReport(writeFileAtomic, junitFile, renderJunit(checks.outcomes), '--junit');
        }
        const denied = checks.outcomes.filter((o) => o.denied === true).length;
        if (opts.json) {
          await write(
            io.stdout,
            json({
              passed,
              failed,
              errors,
              skipped,
              denied,
              withoutCases: checks.withoutCases,
              outcomes: checks.outcomes,
            }),
          );
        } else {
          let summary = `${passed} passed, ${failed} failed, ${errors} errors`;
          if (skipped) summary += `, ${skipped} skipped (not portable)`;
          if (checks.withoutCases.length) summary += ` (no cases.json: ${checks.withoutCases.join(', ')})`;
          await write(io.stdout, `${summary}\n${deniedSummary(checks.outcomes)}`);
          if (junitFile !== undefined) await write(io.stdout, `JUnit report: ${junitFile}\n`);
        }
        if (passed + failed + errors === 0) {
          await write(io.stderr, 'capsule ci: no checks ran (add a cases.json beside capability.json)\n');
          return EXIT.FAILURE;
        }
        return ciExitCode(checks.outcomes);
      } finally {
        await session.close();
      }
    }),
  );
}
