import { CapsuleError } from '../errors.js';
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
  // Staged once: every environment runs variants of these bytes, and the gate is asked about their hash.
  const plan = await executor.planVariants(options.name, options.environments);
  const capability = plan.capability;
  try {
    const inputTexts = options.inputs.map((i) =>
      executor.validateInput(capability, inputDocumentText(i.input ?? {})),
    );
    const runnable = plan.variants.flatMap((v) => (v.ok ? [v] : []));
    if (runnable.length === 0) {
      const reasons = plan.variants.map((v) => `${v.environment}: ${v.ok ? '' : v.reason}`).join('; ');
      throw new CapsuleError(
        'UNSUPPORTED',
        `"${capability.name}" cannot run in any requested environment (${reasons}).`,
      );
    }
    // One decision for the whole comparison, before anything runs.
    const permit = await executor.approve(plan, { signal: options.signal });

    const runOne = async (entry: (typeof runnable)[number]): Promise<EnvironmentReport> => {
      const report: EnvironmentReport = {
        environment: entry.environment,
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
            results.push(await executor.runApproved(permit, entry.capability, inputText, options.signal));
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
    const environments: EnvironmentReport[] = plan.variants.map((v) =>
      v.ok
        ? (done.find((d) => d.environment === v.environment) as EnvironmentReport)
        : { environment: v.environment, status: 'not-portable', reason: v.reason, runs: [] },
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
      inputTexts,
      environments,
      agreement,
      equal: agreement.every((a) => a.equal) && ran.every((e) => e.runs.every((r) => r.stable)),
    };
  } finally {
    await plan.release();
  }
}
