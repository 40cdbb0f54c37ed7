import { describe, expect, it } from 'vitest';
import { manifestSchema } from '../../../../src/manifest/schema.js';
import type { Capability } from '../../../../src/manifest/types.js';
import type { DockerEngine } from '../../../../src/runners/docker/engine.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import { permitFor } from '../../../helpers/permit.js';

/** An engine whose socket accepts but never answers: the worst case for a hang. */
function hungEngine(): DockerEngine {
  const never = (): Promise<never> => new Promise(() => {});
  return new Proxy({} as DockerEngine, {
    get: (_t, prop) =>
      prop === 'ping'
        ? (ms: number) =>
            new Promise((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))
        : never,
  });
}

const capability: Capability = {
  name: 'x',
  environment: 'docker',
  manifest: manifestSchema.parse({
    schemaVersion: 1,
    name: 'x',
    description: 'x',
    environment: 'docker',
    entry: 'run.sh',
    docker: { image: 'capsule/busybox:1' },
  }),
  dir: '/nonexistent/x',
  manifestPath: '/nonexistent/x/capability.json',
  entryPath: '/nonexistent/x/run.sh',
  contentHash: 'sha256:0',
  root: '/nonexistent',
  fsGrants: [],
};

describe('DockerRunner with an engine that does not answer', () => {
  it('available() is {ok:false, reason} within the timeout', async () => {
    const runner = new DockerRunner({ env: {}, engine: hungEngine(), engineTimeoutMs: 200 });
    const r = await runner.available();
    expect(r.ok).toBe(false);
    // The engine never answers: the reason is the timeout's, so the answer came from it, not the engine.
    if (!r.ok) expect(r.reason).toMatch(/no answer within 200 ms/);
  });

  it('run() fails with RUNNER_UNAVAILABLE and a hint, never hangs', async () => {
    const runner = new DockerRunner({ env: {}, engine: hungEngine(), engineTimeoutMs: 200 });
    await expect(runner.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'RUNNER_UNAVAILABLE',
      details: { hint: expect.stringMatching(/provision-docker/) },
    });
  });
});
