import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { assemble } from '../runners/wasm/helpers.js';
import { writeCapability, writeManifest } from '../../helpers/capability.js';

/**
 * A repository ships capabilities whose fs grants reach capsule's own state. `capsule validate`
 * refuses each, naming the file and the field; `capsule run` never starts them (a marker left by
 * the capability's script would show it did).
 */
describe('fs grants that reach capsule’s own state are refused by validate and never run', () => {
  const grants: Array<[string, 'ro' | 'rw']> = [
    ['.capsule/cache', 'rw'],
    ['.capsule/cache', 'ro'],
    ['.capsule/locks', 'rw'],
    ['.capsule', 'ro'],
    ['.', 'ro'],
    ['.', 'rw'],
    ['capabilities/..', 'ro'],
    ['.capsule-cache', 'rw'],
    ['sub/capsule.json', 'ro'],
    ['sub/.capsule', 'rw'],
    ['state-link', 'rw'],
    ['root-link', 'ro'],
    ['Capsule.json', 'ro'],
    ['nested', 'rw'],
    ['nested-state', 'ro'],
  ];

  async function project(): Promise<string> {
    const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-grants-')));
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
    for (const d of ['.capsule/cache', '.capsule/locks', '.capsule-cache', 'sub/.capsule', 'capabilities']) {
      await mkdir(path.join(root, d), { recursive: true });
    }
    await writeFile(path.join(root, 'sub', 'capsule.json'), '{}');
    // Folders that hold another project's config or state one level down.
    await mkdir(path.join(root, 'nested'));
    await writeFile(path.join(root, 'nested', 'capsule.json'), '{}');
    await mkdir(path.join(root, 'nested-state', '.capsule'), { recursive: true });
    await symlink(path.join(root, '.capsule'), path.join(root, 'state-link'));
    await symlink(root, path.join(root, 'root-link'));
    return root;
  }

  const probe = assemble('probe.wat');
  for (const environment of ['wasm', 'shell', 'docker'] as const) {
    it(`${environment}: every variant is invalid, with file and field; run leaves no marker`, async () => {
      const root = await project();
      const marker = path.join(root, 'MARKER');
      for (const [i, [p, mode]] of grants.entries()) {
        const name = `g${i}`;
        const dir = path.join(root, 'capabilities', name);
        await mkdir(dir);
        await writeFile(path.join(dir, 'run.sh'), `#!/bin/sh\ntouch ${marker}\n`, { mode: 0o755 });
        await writeFile(path.join(dir, 'probe.wasm'), probe);
        const how =
          environment === 'wasm'
            ? { entry: 'probe.wasm', args: ['write', 'PLANTED'] }
            : environment === 'shell'
              ? { entry: 'run.sh', interpreter: 'sh' }
              : { entry: 'run.sh', docker: { image: 'capsule/busybox:1' } };
        await writeManifest(dir, {
          schemaVersion: 1,
          name,
          description: 'reaches capsule state',
          environment,
          ...how,
          grants: { fs: [{ path: p, mode }] },
        });
      }
      const v = await cli(['validate', '--json'], { cwd: root });
      expect(v.code).toBe(1);
      const report = JSON.parse(v.stdout) as {
        invalid: Array<{ folder: string; issues: Array<{ file: string; field?: string; message: string }> }>;
      };
      for (const [i, [p, mode]] of grants.entries()) {
        const entry = report.invalid.find((x) => x.folder === `g${i}`);
        expect(`${p} ${mode}: ${entry?.issues[0]?.field}`).toBe(`${p} ${mode}: grants.fs[0].path`);
        expect(entry?.issues[0]?.file).toBe(path.join(root, 'capabilities', `g${i}`, 'capability.json'));
        const r = await cli(['run', `g${i}`, '--grant', `run_capability:g${i}`, '--input', '{}'], {
          cwd: root,
        });
        expect(r.code).not.toBe(0);
      }
      expect(existsSync(marker)).toBe(false);
      for (const d of [
        '',
        '.capsule/cache',
        '.capsule/locks',
        '.capsule',
        '.capsule-cache',
        'sub/.capsule',
      ]) {
        expect(`${d}: ${existsSync(path.join(root, d, 'PLANTED'))}`).toBe(`${d}: false`);
      }
    });
  }

  it('a grant beside capsule’s state is still valid', async () => {
    const root = await project();
    await mkdir(path.join(root, 'data'));
    await writeCapability(
      path.join(root, 'capabilities'),
      'fine',
      { description: 'reads data', grants: { fs: [{ path: 'data', mode: 'rw' }] } },
      { 'run.sh': '#!/bin/sh\necho ok\n' },
    );
    const v = await cli(['validate', 'capabilities/fine'], { cwd: root });
    expect(v.code).toBe(0);
  });
});
