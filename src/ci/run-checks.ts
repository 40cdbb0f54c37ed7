import { judgeCase, loadCases, type CheckCase } from '../checks/cases.js';
import { authorizeVariants } from '../compare/authorize.js';
import { deriveVariant } from '../compare/variants.js';
import { isCapsuleError } from '../errors.js';
import type { Executor } from '../executor/executor.js';
import type { Capability, Environment, InvalidCapability } from '../manifest/types.js';
import type { CheckOutcome } from './junit.js';

export interface CheckRun {
  outcomes: CheckOutcome[];
  /** Capabilities without a cases.json. */
  withoutCases: string[];
  /** Invalid manifests or cases files: each is an error outcome too. */
  invalid: InvalidCapability[];
}

const message = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * Run every case of every capability through the gate (in CI, Ask is a denial unless granted), in its own
 * environment or in each of `environments` it is portable to. A denial or invalid input fails the case; a
 * runner that cannot run is an error; an environment the capability is not portable to is skipped.
 */
export async function runChecks(options: {
  executor: Executor;
  capabilities: readonly Capability[];
  invalid?: readonly InvalidCapability[];
  environments?: readonly Environment[] | undefined;
  onOutcome?: (outcome: CheckOutcome) => void;
  signal?: AbortSignal;
}): Promise<CheckRun> {
  const { executor } = options;
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
    let cases: CheckCase[] | undefined;
    try {
      cases = await loadCases(capability);
    } catch (err) {
      record({
        capability: capability.name,
        environment: capability.environment,
        caseName: 'cases.json',
        status: 'error',
        message: message(err),
        durationMs: 0,
      });
      continue;
    }
    if (cases === undefined) {
      run.withoutCases.push(capability.name);
      continue;
    }
    for (const environment of options.environments ?? [capability.environment]) {
      await checkEnvironment(executor, capability, environment, cases, record, options.signal);
    }
  }
  return run;
}

async function checkEnvironment(
  executor: Executor,
  capability: Capability,
  environment: Environment,
  cases: readonly CheckCase[],
  record: (o: CheckOutcome) => void,
  signal: AbortSignal | undefined,
): Promise<void> {
  const each = (status: CheckOutcome['status'], why: string): void => {
    for (const c of cases) {
      record({
        capability: capability.name,
        environment,
        caseName: c.name,
        status,
        message: why,
        durationMs: 0,
      });
    }
  };
  const variant = await deriveVariant(capability, environment);
  if (!variant.ok) return each('skipped', `not portable to ${environment}: ${variant.reason}`);
  try {
    try {
      await authorizeVariants(executor, capability, [executor.isolation(variant.capability)], signal);
    } catch (err) {
      // A denial fails every case (the message names the key to grant); anything else is an error.
      return each(isCapsuleError(err, 'PERMISSION_DENIED') ? 'failed' : 'error', message(err));
    }
    for (const check of cases) {
      const base = { capability: capability.name, environment, caseName: check.name };
      const started = performance.now();
      try {
        const input = executor.validateInput(capability, JSON.stringify(check.input ?? {}));
        const result = await executor.runCapability(variant.capability, input, signal);
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
        const failed = isCapsuleError(err, 'INPUT_INVALID');
        record({
          ...base,
          status: failed ? 'failed' : 'error',
          message: message(err),
          durationMs: performance.now() - started,
        });
      }
    }
  } finally {
    await variant.cleanup?.();
  }
}
