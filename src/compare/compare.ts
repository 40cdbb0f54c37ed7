import { CapsuleError } from '../errors.js';
import type { Executor } from '../executor/executor.js';
import type { IsolationReport } from '../executor/isolation.js';
import type { Environment } from '../manifest/types.js';
import type { RunResult, Runner } from '../runners/types.js';
import { authorizeVariants } from './authorize.js';
import { deriveVariant, type Variant } from './variants.js';

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
  environments: EnvironmentReport[];
  /** Per input: do all environments that ran agree on stdout and exit code? */
  agreement: Array<{ input: string; equal: boolean; differing: Environment[] }>;
  /** True when every input agrees across every environment that ran. */
  equal: boolean;
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
  signal?: AbortSignal;
  onProgress?: (message: string) => void;
}): Promise<CompareReport> {
  const { executor } = options;
  if (options.runs < 1 || options.runs > 1000)
    throw new CapsuleError('USAGE', '--runs must be between 1 and 1000.');
  const capability = await executor.registry.get(options.name);
  const inputTexts = options.inputs.map((i) =>
    executor.validateInput(capability, JSON.stringify(i.input ?? {})),
  );

  const variants: Array<{ environment: Environment; variant: Variant }> = [];
  for (const environment of options.environments) {
    variants.push({ environment, variant: await deriveVariant(capability, environment) });
  }
  try {
    const runnable = variants.flatMap((v) =>
      v.variant.ok
        ? [
            {
              environment: v.environment,
              capability: v.variant.capability,
              how: v.variant.how,
              isolation: executor.isolation(v.variant.capability),
            },
          ]
        : [],
    );
    if (runnable.length === 0) {
      const reasons = variants
        .map((v) => `${v.environment}: ${v.variant.ok ? '' : v.variant.reason}`)
        .join('; ');
      throw new CapsuleError(
        'UNSUPPORTED',
        `"${capability.name}" cannot run in any requested environment (${reasons}).`,
      );
    }
    // One decision for the whole comparison, before anything runs.
    await authorizeVariants(
      executor,
      capability,
      runnable.map((r) => r.isolation),
      options.signal,
    );

    const runOne = async (entry: (typeof runnable)[number]): Promise<EnvironmentReport> => {
      const report: EnvironmentReport = {
        environment: entry.environment,
        status: 'ok',
        how: entry.how,
        isolation: entry.isolation,
        runs: [],
      };
      let available: Awaited<ReturnType<Runner['available']>>;
      try {
        available = await executor.runner(entry.environment).available();
      } catch (err) {
        available = { ok: false, reason: (err as Error).message };
      }
      if (!available.ok) return { ...report, status: 'unavailable', reason: available.reason };
      try {
        for (const [i, inputText] of inputTexts.entries()) {
          const results: RunResult[] = [];
          for (let n = 0; n < options.runs; n++) {
            results.push(await executor.runCapability(entry.capability, inputText, options.signal));
          }
          options.onProgress?.(`${entry.environment}: ${options.inputs[i]?.name ?? i} done`);
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
            stable: results.every((r) => r.stdout === first.stdout && r.exitCode === first.exitCode),
          });
        }
      } catch (err) {
        return { ...report, status: 'error', reason: (err as Error).message };
      }
      return report;
    };

    const done: EnvironmentReport[] = [];
    if (options.sequential) {
      for (const entry of runnable) done.push(await runOne(entry));
    } else {
      done.push(...(await Promise.all(runnable.map(runOne))));
    }
    const environments: EnvironmentReport[] = variants.map((v) =>
      v.variant.ok
        ? (done.find((d) => d.environment === v.environment) as EnvironmentReport)
        : { environment: v.environment, status: 'not-portable', reason: v.variant.reason, runs: [] },
    );

    const ran = environments.filter((e) => e.status === 'ok');
    const agreement = options.inputs.map((input, i) => {
      const reference = ran[0]?.runs[i];
      const differing = ran
        .filter((e) => e.runs[i]?.stdout !== reference?.stdout || e.runs[i]?.exitCode !== reference?.exitCode)
        .map((e) => e.environment);
      return { input: input.name, equal: differing.length === 0, differing };
    });
    return {
      capability: capability.name,
      contentHash: capability.contentHash,
      runsPerInput: options.runs,
      inputs: options.inputs.map((i) => i.name),
      environments,
      agreement,
      equal: agreement.every((a) => a.equal) && ran.every((e) => e.runs.every((r) => r.stable)),
    };
  } finally {
    await Promise.all(variants.map((v) => (v.variant.ok ? v.variant.cleanup?.() : undefined)));
  }
}
