import { CapsuleError } from '../base/errors.js';
import type { Capability } from '../manifest/types.js';

/** Module-private: an object literal or a copy cannot name it, so only mintRunnerPermit makes the type. */
const MINTED: unique symbol = Symbol('capsule runner permit');

/**
 * What a runner needs to run one capability once: made only by mintRunnerPermit, which only the executor calls
 * (after its gate allowed the call and its own RunPermit covers the staged capability). Frozen; it names what
 * it allows (name and content hash) and is spent by the run it starts.
 */
export interface RunnerPermit {
  readonly capability: string;
  readonly contentHash: string;
  readonly [MINTED]: true;
}

interface Minted {
  /** The staged capability the executor runs, by identity. */
  readonly capability: Capability;
  /** Every field of it as it was minted: a change since (its content hash above all) runs nothing. */
  readonly fingerprint: string;
}

/** Live permits → what each one allows. A permit leaves this map when its run starts. */
const live = new WeakMap<object, Minted>();
/** Permits whose run started: kept only to say why a second run is refused. */
const spent = new WeakSet<object>();

/**
 * One run of `capability` exactly as it is now. The executor's alone (test/unit/architecture.test.ts fails when
 * another module of src/ imports it): every other path to a runner has nothing that runs.
 */
export function mintRunnerPermit(capability: Capability): RunnerPermit {
  const permit = Object.freeze({
    capability: capability.name,
    contentHash: capability.contentHash,
    [MINTED]: true as const,
  });
  live.set(permit, { capability, fingerprint: JSON.stringify(capability) });
  return permit;
}

/** Why `permit` does not allow running `capability` now, or undefined when it does. */
function refusal(permit: unknown, capability: Capability): string | undefined {
  if (typeof permit !== 'object' || permit === null) return 'it was given no permit';
  const minted = live.get(permit);
  if (minted === undefined) {
    return spent.has(permit)
      ? 'its permit was already used: a permit runs once'
      : "its permit was not made by capsule's executor";
  }
  const allowed = permit as RunnerPermit;
  if (allowed.capability !== capability.name) return `its permit is for ${allowed.capability}`;
  if (minted.capability !== capability) return 'its permit is for another copy of it';
  if (JSON.stringify(capability) === minted.fingerprint) return undefined;
  return capability.contentHash !== allowed.contentHash
    ? `its content changed since its permit was made (${allowed.contentHash} → ${capability.contentHash})`
    : 'it changed since its permit was made';
}

function deny(capability: Capability, why: string): CapsuleError {
  return new CapsuleError('PERMISSION_DENIED', `${capability.name} was not run: ${why}.`, {
    key: `run_capability:${capability.name}`,
    file: capability.manifestPath,
    hint: 'A capability runs through the executor (capsule run, run_capability), which asks the gate first.',
  });
}

/**
 * A runner that hands the call to another runner (lazy, engine pool) refuses here what the one it hands
 * to would refuse, before it loads or places anything; the permit stays unspent for that runner.
 */
export function assertPermit(permit: RunnerPermit, capability: Capability): void {
  const why = refusal(permit, capability);
  if (why !== undefined) throw deny(capability, why);
}

/** The first thing a runner that starts the run does: refuses what the permit does not allow, and spends it. */
export function redeemPermit(permit: RunnerPermit, capability: Capability): void {
  assertPermit(permit, capability);
  live.delete(permit);
  spent.add(permit);
}
