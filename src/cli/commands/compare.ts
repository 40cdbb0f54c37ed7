import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import type { CompareInput, CompareReport } from '../../compare/compare.js';
import { CapsuleError } from '../../base/errors.js';
import { EXIT } from '../exit-codes.js';
import { parseEnvs } from '../args.js';
import { addEngineFlag, addGateFlags, sessionFlags, type GateFlags } from '../flags.js';
import { action, json, progressLine, write, type CliIO } from '../output.js';
import { reportTarget, writeReport } from '../report-file.js';

async function readInputs(io: CliIO, opts: { input?: string; cases?: string }): Promise<CompareInput[]> {
  if (opts.input !== undefined && opts.cases !== undefined)
    throw new CapsuleError('USAGE', 'Use either --input or --cases, not both.');
  if (opts.cases !== undefined) {
    const file = path.resolve(io.cwd, opts.cases);
    const { parseCases } = await import('../../cases/cases.js');
    const text = await readFile(file, 'utf8').catch(() => {
      throw new CapsuleError('NOT_FOUND', `Cannot read --cases ${file}.`, { file });
    });
    return parseCases(text, file).map((c) => ({ name: c.name, input: c.input }));
  }
  try {
    return [{ name: 'input', input: JSON.parse(opts.input ?? '{}') }];
  } catch (err) {
    throw new CapsuleError(
      'INPUT_INVALID',
      `--input is not valid JSON: ${(err as Error).message}`,
      {
        field: '--input',
      },
      { cause: err },
    );
  }
}

/**
 * Outputs that differ: 1; otherwise a requested environment that could not run (no engine, an engine that
 * stopped answering, not portable to it): 69, the same "unavailable" as everywhere else.
 */
export function compareExitCode(report: Pick<CompareReport, 'equal' | 'environments'>): number {
  if (!report.equal) return EXIT.FAILURE;
  return report.environments.every((e) => e.status === 'ok') ? EXIT.OK : EXIT.UNAVAILABLE;
}

export function registerCompare(program: Command, io: CliIO): void {
  addGateFlags(
    addEngineFlag(
      program
        .command('compare')
        .description(
          'Run one capability in several environments and compare outputs, exit codes and timings.\n' +
            'A JavaScript-authored capability is portable: a component in wasm, node on the host, node in the node image.\n' +
            'With --engine a,b (two or more engines), docker runs on each engine: one column per engine (docker@a, docker@b).',
        )
        .argument('<name>', 'capability name')
        .option('--env <list>', 'comma list of environments', 'shell,wasm,docker')
        .option('--input <json>', 'one input document (default {})')
        .option('--cases <file>', 'a cases.json whose inputs to use')
        .option('--runs <n>', 'runs per input and environment (timings: median and p95)', '5')
        .option('--sequential', 'run environments one after another (cleaner timings; default: concurrently)')
        .option('--html <file>', 'write a self-contained HTML report with an SVG chart')
        .option('--force', 'overwrite an existing --html file')
        .option('--json', 'print the report as JSON'),
    ),
  ).action(
    action(
      io,
      async (
        name: string,
        opts: GateFlags & {
          env: string;
          input?: string;
          cases?: string;
          runs: string;
          sequential?: boolean;
          html?: string;
          force?: boolean;
          json?: boolean;
        },
      ) => {
        const environments = parseEnvs(opts.env);
        const runs = Number(opts.runs);
        if (!Number.isInteger(runs) || runs < 1 || runs > 1000)
          throw new CapsuleError('USAGE', `--runs ${opts.runs}: must be an integer from 1 to 1000.`);
        const inputs = await readInputs(io, opts);
        const htmlFile = await reportTarget(io.cwd, opts.html, '--html', opts.force === true);
        const [{ compareCapability }, { renderHtml, renderTable }, { writeFileAtomic }, { openSession }] =
          await Promise.all([
            import('../../compare/compare.js'),
            import('../../compare/render.js'),
            import('../../base/atomic-write.js'),
            import('../session.js'),
          ]);
        const session = await openSession(io, sessionFlags(opts, { command: 'compare', json: opts.json }));
        try {
          const report = await compareCapability({
            executor: session.executor,
            name,
            environments,
            inputs,
            runs,
            sequential: opts.sequential ?? false,
            // --engine a,b: the docker environment on each engine, side by side.
            engines: (opts.engine ?? io.env['CAPSULE_ENGINE'])
              ?.split(',')
              .map((s) => s.trim())
              .filter((s) => s !== ''),
            onProgress: progressLine(io, 'compare', { json: opts.json }),
          });
          if (htmlFile !== undefined)
            await writeReport(writeFileAtomic, htmlFile, renderHtml(report), '--html');
          await write(io.stdout, opts.json ? json(report) : renderTable(report));
          if (htmlFile !== undefined && !opts.json) await write(io.stdout, `HTML report: ${htmlFile}\n`);
          return compareExitCode(report);
        } finally {
          await session.close();
        }
      },
    ),
  );
}
