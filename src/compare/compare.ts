import { CapsuleError } from '../base/errors.js';
import type { Executor } from '../executor/executor.js';
import type { IsolationReport } from '../executor/isolation.js';
import type { Environment } from '../manifest/types.js';
import { inputDocumentText } from '../manifest/input.js';
import type { RunResult } from '../runners/types.js';

export interface CompareInput {
  name: string;
  input: unknown;
}

export interface EnvironmentRun {
  input: string;
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  /** Every run's duration, in order. */
  durationsMs: number[];
  medianMs: number;
  p95Ms: number;
  /** Limits hit in any run: timeout, output, memory, canceled. */
  limitHits: string[];
  /** Whether all N runs gave the same stdout and exit code (a flaky capability shows here). */
  stable: boolean;
}

export interface EnvironmentReport {
  environment: Environment;
  /** The Docker engine this column ran on (`--engine a,b`: one docker column per engine). */
  engine?: string | undefined;
  status: 'ok' | 'not-portable' | 'unavailable' | 'error';
  /** Why it is not ok. */
  reason?: string | undefined;
  /** How the capability was run there (as written, node on the host, …). */
  how?: string | undefined;
  isolation?: IsolationReport | undefined;
  runs: EnvironmentRun[];
}

export interface CompareReport {
  capability: string;
  contentHash: string;
  runsPerInput: number;
  inputs: string[];
  /** Each input document as compact JSON, in the order of `inputs` (the chart names a lone `--input` by it). */
  inputTexts?: string[] | undefined;
  environments: EnvironmentReport[];
  /** Per input: do all environments that ran agree on stdout and exit code? (`differing`: column names, see columnName) */
  agreement: Array<{ input: string; equal: boolean; differing: string[] }>;
  /** True when every input agrees across every environment that ran. */
  equal: boolean;
}

/** A report column's name: the environment, or `docker@ENGINE` when docker ran on several engines. */
export function columnName(e: Pick<EnvironmentReport, 'environment' | 'engine'>): string {
  return e.engine !== undefined ? `${e.environment}@${e.engine}` : e.environment;
}

/** Two runs agree when they printed the same stdout and ended with the same exit code (compare's rule). */
export function sameOutput(
  a: Pick<RunResult, 'stdout' | 'exitCode'>,
  b: Pick<RunResult, 'stdout' | 'exitCode'>,
): boolean {
  return a.stdout === b.stdout && a.exitCode === b.exitCode;
}

export function percentile(samples: readonly number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
}

function limitHits(r: RunResult): string[] {
  const hits: string[] = [];
  if (r.timedOut) hits.push('timeout');
  if (r.truncated) hits.push('output');
  if (r.oomKilled) hits.push('memory');
  if (r.canceled) hits.push('canceled');
  return hits;
}

/**
 * Run one capability in several environments, N times per input, and compare outputs, exit codes and
 * timings. Environments run concurrently unless `sequential` (cleaner timings on a busy machine).
 */
export async function compareCapability(options: {
  executor: Executor;
  name: string;
  environments: readonly Environment[];
  inputs: readonly CompareInput[];
  runs: number;
  sequential?: boolean;
  /** Two or more Docker engines: the docker environment runs on each of them, one column per engine. */
  engines?: readonly string[] | undefined;
  signal?: AbortSignal;
  onProgress?: (message: string) => void;
}): Promise<CompareReport> {
  const { executor } = options;
  if (options.runs < 1 || options.runs > 1000)
    throw new CapsuleError('USAGE', '--runs must be between 1 and 1000.');
  // Staged once: every environment runs variants of these bytes, and the gate is asked about their hash.
  const plan = await executor.planVariants(options.name, options.environments);
  const capability = plan.capability;
  try {
    const inputTexts: string[] = [];
    for (const i of options.inputs)
      inputTexts.push(await executor.validateInput(capability, inputDocumentText(i.input ?? {})));
    const runnable = plan.variants.flatMap((v) => (v.ok ? [v] : []));
    const perEngine =
      (options.engines?.length ?? 0) >= 2 ? (options.engines as readonly string[]) : undefined;
    // One column per environment, and for docker one per engine when several are named.
    const columns = runnable.flatMap((v) =>
      v.environment === 'docker' && perEngine !== undefined
        ? perEngine.map((engine) => ({ entry: v, engine }))
        : [{ entry: v, engine: undefined as string | undefined }],
    );
    if (runnable.length === 0) {
      const reasons = plan.variants.map((v) => `${v.environment}: ${v.ok ? '' : v.reason}`).join('; ');
      throw new CapsuleError(
        'UNSUPPORTED',
        `"${capability.name}" cannot run in any requested environment (${reasons}).`,
      );
    }
    // One decision for the whole comparison, before anything runs.
    const permit = await executor.approve(plan, { signal: options.signal });

    const runOne = async ({ entry, engine }: (typeof columns)[number]): Promise<EnvironmentReport> => {
      const report: EnvironmentReport = {
        environment: entry.environment,
        engine,
        status: 'ok',
        how: entry.how,
        isolation: entry.isolation,
        runs: [],
      };
      const available = await executor.available(entry.environment);
      if (!available.ok) return { ...report, status: 'unavailable', reason: available.reason };
      try {
        for (const [i, inputText] of inputTexts.entries()) {
          const results: RunResult[] = [];
          for (let n = 0; n < options.runs; n++) {
            results.push(
              await executor.runApproved(permit, entry.capability, inputText, options.signal, { engine }),
            );
          }
          options.onProgress?.(`${columnName(report)}: ${options.inputs[i]?.name ?? i} done`);
          const first = results[0] as RunResult;
          const durations = results.map((r) => r.durationMs);
          report.runs.push({
            input: options.inputs[i]?.name ?? String(i),
            exitCode: first.exitCode,
            signal: first.signal,
            stdout: first.stdout,
            stderr: first.stderr,
            durationsMs: durations,
            medianMs: percentile(durations, 0.5),
            p95Ms: percentile(durations, 0.95),
            limitHits: [...new Set(results.flatMap(limitHits))],
            stable: results.every((r) => sameOutput(r, first)),
          });
        }
      } catch (err) {
        return { ...report, status: 'error', reason: (err as Error).message };
      }
      return report;
    };

    const done: EnvironmentReport[] = [];
    if (options.sequential) {
      for (const column of columns) done.push(await runOne(column));
    } else {
      done.push(...(await Promise.all(columns.map(runOne))));
    }
    const environments: EnvironmentReport[] = plan.variants.flatMap((v) =>
      v.ok
        ? done.filter((d) => d.environment === v.environment)
        : [{ environment: v.environment, status: 'not-portable' as const, reason: v.reason, runs: [] }],
    );

    const ran = environments.filter((e) => e.status === 'ok');
    const agreement = options.inputs.map((input, i) => {
      const reference = ran[0]?.runs[i];
      const differing = ran
        .filter((e) => {
          const run = e.runs[i];
          return run === undefined || reference === undefined || !sameOutput(run, reference);
        })
        .map(columnName);
      return { input: input.name, equal: differing.length === 0, differing };
    });
    return {
      capability: capability.name,
      contentHash: capability.contentHash,
      runsPerInput: options.runs,
      inputs: options.inputs.map((i) => i.name),
      inputTexts,
      environments,
      agreement,
      equal: agreement.every((a) => a.equal) && ran.every((e) => e.runs.every((r) => r.stable)),
    };
  } finally {
    await plan.release();
  }
}
