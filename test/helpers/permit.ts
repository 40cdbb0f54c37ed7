import type { Capability } from '../../src/manifest/types.js';
import { mintRunnerPermit, type RunnerPermit } from '../../src/runners/permit.js';
import type { RunRequest } from '../../src/runners/types.js';

/**
 * What the executor hands a runner once its gate allowed the call: one run of `capability` exactly as it is
 * now. Tests that drive a runner directly get it the same way (a permit runs once: one per run).
 */
export function permitFor(capability: Capability): RunnerPermit {
  return mintRunnerPermit(capability);
}

/**
 * `request` and a permit for its capability, as run()'s two arguments: for a request whose capability is made
 * in place (`runner.run(...withPermit({ capability: await fixture('x'), input }))`), evaluated once.
 */
export function withPermit(request: RunRequest): [RunRequest, RunnerPermit] {
  return [request, mintRunnerPermit(request.capability)];
}
