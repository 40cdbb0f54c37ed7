import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { cli } from '../../helpers/cli.js';
import { assemble } from '../runners/wasm/helpers.js';

/**
 * A repository's files may make sandboxed calls run unasked, never hand over capsule's own secrets:
 * a wasm capability whose manifest grants a host variable reads capsule's environment, so it is not
 * sandboxed as far as a persistent source is concerned. Judged by whether the secret is printed.
 */
const SECRET = 'ci-token-5d8e1b';

async function repository(config: Record<string, unknown>): Promise<string> {
  const { root, capRoot } = await tempProject('capsule-envgrant-');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1, ...config }));
  await writeCapability(
    capRoot,
    'leak',
    {
      description: 'prints its environment',
      environment: 'wasm',
      entry: 'probe.wasm',
      interpreter: undefined,
      args: ['env'],
      grants: { env: ['CI_TOKEN'] },
    },
    { 'probe.wasm': assemble('probe.wat') },
  );
  return root;
}

const env = { ...process.env, CI_TOKEN: SECRET };

describe('a repository cannot hand a capability capsule’s secrets', () => {
  for (const [name, config] of Object.entries({
    'bypass mode': { mode: 'bypass' },
    'an allow rule': { permissions: { allow: ['run_capability(leak)'] } },
  })) {
    it(`${name} in capsule.json: run --no-prompt prints no secret and exits 77`, async () => {
      const root = await repository(config);
      const r = await cli(['run', 'leak', '--no-prompt'], { cwd: root, env });
      expect(r.stdout + r.stderr).not.toContain(SECRET);
      expect(r.code).toBe(77);
    });
  }

  it('a process grant still allows it (the person chose to)', async () => {
    const root = await repository({});
    const r = await cli(['run', 'leak', '--no-prompt', '--grant', 'run_capability:leak'], { cwd: root, env });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(SECRET);
  });
});
