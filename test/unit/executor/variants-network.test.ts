import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { deriveVariant } from '../../../src/executor/variants.js';
import { loadValid } from '../../helpers/capability.js';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));

describe('variants of a network-granted component', () => {
  it('is not portable to shell (the whole host network) nor docker (its code speaks the Wasm host’s http)', async () => {
    const capability = await loadValid(
      path.join(REPO, 'capabilities', 'fetch-wasm'),
      REPO,
      path.join(REPO, 'capabilities'),
    );
    for (const environment of ['shell', 'docker'] as const) {
      const v = await deriveVariant(capability, environment);
      expect(v.ok, environment).toBe(false);
      if (!v.ok) expect(v.reason).toMatch(/grants\.network/);
    }
    // Without the grant its source still imports capsule:capability/http, which only the Wasm host has.
    const bare = {
      ...capability,
      manifest: { ...capability.manifest, grants: { ...capability.manifest.grants, network: [] } },
    };
    const v = await deriveVariant(bare, 'shell');
    expect(v.ok).toBe(false);
    if (!v.ok) expect(v.reason).toMatch(/capsule:/);
  });
});
