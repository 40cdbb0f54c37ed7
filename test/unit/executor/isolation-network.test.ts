import { describe, expect, it } from 'vitest';
import { defaultIsolation } from '../../../src/executor/isolation.js';
import { manifestSchema } from '../../../src/manifest/schema.js';
import type { Capability } from '../../../src/manifest/types.js';

function cap(environment: 'shell' | 'wasm' | 'docker', network: unknown[]): Capability {
  const manifest = manifestSchema.parse({
    schemaVersion: 1,
    name: 'n',
    description: 'd',
    environment,
    entry: environment === 'wasm' ? 'x.wasm' : 'run.sh',
    ...(environment === 'docker' ? { docker: { image: 'capsule/busybox:1' } } : {}),
    grants: { network },
  });
  return {
    name: 'n',
    environment,
    manifest,
    dir: '/x',
    manifestPath: '/x/capability.json',
    entryPath: '/x/e',
    contentHash: 'sha256:x',
    root: '/',
    fsGrants: [],
  };
}

describe('the isolation report of network-granted capabilities', () => {
  const grant = [{ host: 'api.example.com', ports: [443] }];
  it('wasm and docker stay sandboxed and name the hosts', () => {
    for (const env of ['wasm', 'docker'] as const) {
      const r = defaultIsolation(cap(env, grant));
      expect(r.sandboxed, env).toBe(true);
      expect(r.summary, env).toContain('api.example.com:443');
    }
    expect(defaultIsolation(cap('wasm', [])).summary).toMatch(/no network/);
  });
  it('shell says the grant binds nothing', () => {
    const r = defaultIsolation(cap('shell', grant));
    expect(r.sandboxed).toBe(false);
    expect(r.summary).toMatch(/grants\.network is not enforced/);
  });
});
