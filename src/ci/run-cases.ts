import { loadCases, type CapabilityCase } from '../cases/cases.js';
import { judgeCase } from './judge-case.js';
import { isCapsuleError } from '../base/errors.js';
import type { Executor, PlannedVariant, RunPermit, VariantPlan } from '../executor/executor.js';
import type { Capability, Environment, InvalidCapability } from '../manifest/types.js';
import { inputDocumentText } from '../manifest/input.js';
import type { CaseOutcome } from './junit.js';

export interface CaseRun {
  outcomes: CaseOutcome[];
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
 * A case is judged by every contract a run has (src/cases/cases.ts), and its outcome names the one
 * it broke.
 */
export async function runCases(options: {
  executor: Executor;
  capabilities: readonly Capability[];
  invalid?: readonly InvalidCapability[];
  environments?: readonly Environment[] | undefined;
  onOutcome?: (outcome: CaseOutcome) => void;
  signal?: AbortSignal;
}): Promise<CaseRun> {
  const { executor } = options;
  const run: CaseRun = { outcomes: [], withoutCases: [], invalid: [...(options.invalid ?? [])] };
  const record = (o: CaseOutcome): void => {
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
    let cases: CapabilityCase[] | undefined;
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
    const environments = options.environments ?? [capability.environment];
    let plan: VariantPlan;
    try {
      // Staged once for every environment; each environment is still its own gate decision.
      plan = await executor.planVariants(capability.name, environments);
    } catch (err) {
      for (const environment of environments)
        eachCase(record, capability, environment, cases, 'error', message(err));
      continue;
    }
    try {
      for (const variant of plan.variants) {
        await checkEnvironment(executor, plan, variant, cases, record, options.signal);
      }
    } finally {
      await plan.release();
    }
  }
  return run;
}

function eachCase(
  record: (o: CaseOutcome) => void,
  capability: Capability,
  environment: Environment,
  cases: readonly CapabilityCase[],
  status: CaseOutcome['status'],
  why: string,
): void {
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
}

async function checkEnvironment(
  executor: Executor,
  plan: VariantPlan,
  variant: PlannedVariant,
  cases: readonly CapabilityCase[],
  record: (o: CaseOutcome) => void,
  signal: AbortSignal | undefined,
): Promise<void> {
  const { capability } = plan;
  const { environment } = variant;
  const each = (status: CaseOutcome['status'], why: string): void =>
    eachCase(record, capability, environment, cases, status, why);
  if (!variant.ok) return each('skipped', `not portable to ${environment}: ${variant.reason}`);
  let permit: RunPermit;
  try {
    permit = await executor.approve(plan, { environments: [environment], signal });
  } catch (err) {
    // A denial fails every case (the message names the key to grant); anything else is an error.
    if (!isCapsuleError(err, 'PERMISSION_DENIED')) return each('error', message(err));
    for (const c of cases) {
      record({
        capability: capability.name,
        environment,
        caseName: c.name,
        status: 'failed',
        message: message(err),
        contract: 'permission',
        denied: true,
        durationMs: 0,
      });
    }
    return;
  }
  for (const check of cases) {
    const base = { capability: capability.name, environment, caseName: check.name };
    const started = performance.now();
    try {
      const input = await executor.validateInput(capability, inputDocumentText(check.input ?? {}));
      const result = await executor.runApproved(permit, variant.capability, input, signal);
      const broke = judgeCase(check, result);
      record({
        ...base,
        status: broke === undefined ? 'passed' : 'failed',
        message: broke?.message,
        contract: broke?.contract,
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
        contract: failed ? 'inputSchema' : undefined,
        durationMs: performance.now() - started,
      });
    }
  }
}
