import { judgeCase, loadCases } from '../checks/cases.js';
import { isCapsuleError } from '../errors.js';
import type { Executor } from '../executor/executor.js';
import type { Capability, InvalidCapability } from '../manifest/types.js';
import type { CheckOutcome } from './junit.js';

export interface CheckRun {
  outcomes: CheckOutcome[];
  /** Capabilities without a cases.json. */
  withoutCases: string[];
  /** Invalid manifests or cases files: each is an error outcome too. */
  invalid: InvalidCapability[];
}

/**
 * Run every case of every capability through the executor (so through the gate: in CI, Ask is a
 * denial unless granted). Failures are data; only a broken executor throws.
 */
export async function runChecks(options: {
  executor: Executor;
  capabilities: readonly Capability[];
  invalid?: readonly InvalidCapability[];
  onOutcome?: (outcome: CheckOutcome) => void;
  signal?: AbortSignal;
}): Promise<CheckRun> {
  const run: CheckRun = { outcomes: [], withoutCases: [], invalid: [...(options.invalid ?? [])] };
  const record = (o: CheckOutcome): void => {
    run.outcomes.push(o);
    options.onOutcome?.(o);
  };
  for (const inv of run.invalid) {
    const first = inv.issues[0];
    record({
      capability: inv.folder,
      environment: 'manifest',
      caseName: 'valid manifest',
      status: 'error',
      message: first ? `${first.file}: ${first.field ?? '(file)'}: ${first.message}` : 'invalid',
      durationMs: 0,
    });
  }
  for (const capability of options.capabilities) {
    let cases;
    try {
      cases = await loadCases(capability);
    } catch (err) {
      record({
        capability: capability.name,
        environment: capability.environment,
        caseName: 'cases.json',
        status: 'error',
        message: (err as Error).message,
        durationMs: 0,
      });
      continue;
    }
    if (cases === undefined) {
      run.withoutCases.push(capability.name);
      continue;
    }
    for (const check of cases) {
      const base = { capability: capability.name, environment: capability.environment, caseName: check.name };
      const started = performance.now();
      try {
        const { result } = await options.executor.run(capability.name, check.input, {
          signal: options.signal,
        });
        const why = judgeCase(check, result);
        record({
          ...base,
          status: why === undefined ? 'passed' : 'failed',
          message: why,
          durationMs: result.durationMs,
          stdout: result.stdout,
          stderr: result.stderr,
        });
      } catch (err) {
        // A denial or invalid input is the capability's check failing; a missing runner is an error.
        const failed = isCapsuleError(err, 'PERMISSION_DENIED') || isCapsuleError(err, 'INPUT_INVALID');
        record({
          ...base,
          status: failed ? 'failed' : 'error',
          message: (err as Error).message,
          durationMs: performance.now() - started,
        });
      }
    }
  }
  return run;
}
