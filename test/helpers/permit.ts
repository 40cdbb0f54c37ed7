import type { Capability } from '../../src/manifest/types.js';
import { mintRunnerPermit, type RunnerPermit } from '../../src/runners/permit.js';

/**
 * What the executor hands a runner once its gate allowed the call: one run of `capability` exactly as it is
 * now. Tests that drive a runner directly get it the same way (a permit runs once: one per run).
 */
export function permitFor(capability: Capability): RunnerPermit {
  return mintRunnerPermit(capability);
}
