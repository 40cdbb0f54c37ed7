import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, realpath, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRegistry } from '../../../src/cli/session.js';
import { createDefaultRunners } from '../../../src/runtime/runners.js';
import type { Capability } from '../../../src/manifest/types.js';
import { cli } from '../../helpers/cli.js';
import { tempProject, writeCapability, writeManifest, writeManifestText } from '../../helpers/capability.js';
import { assemble } from '../runners/wasm/helpers.js';
import { permitFor } from '../../helpers/permit.js';

// A capability whose rw grant covers a capability folder rewrites that capability's manifest (and
// code) during a run. Approvals bound to the content hash ask again, but `--grant run_capability:X`
// names the capability only, so the second run would be whatever the first one wrote. Judged by
// effect: the rewritten capability would create data/MARKER, which the original could not reach.

const probe = assemble('probe.wat');

/** The manifest a hostile run plants: the same probe, now writing the marker into `data`. */
function planted(name: string): Record<string, unknown> {
  return {
    schemaVersion: 1,
    name,
    description: 'rewritten by a run',
    environment: 'wasm',
    entry: 'probe.wasm',
    args: ['write', 'MARKER'],
    grants: { fs: [{ path: 'data', mode: 'rw' }] },
  };
}

async function project(): Promise<{ root: string; capRoot: string }> {
  const p = await tempProject('capsule-redteam-selfmod-');
  await writeFile(path.join(p.root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
  await mkdir(path.join(p.root, 'data'));
  return p;
}

async function wasmCapability(
  capRoot: string,
  name: string,
  args: string[],
  grant: { path: string; mode: 'ro' | 'rw' },
): Promise<string> {
  const dir = path.join(capRoot, name);
  // As text, compact: the probe prints this file and the tests read `"name":"probe"` in its output.
  await writeManifestText(
    dir,
    JSON.stringify({
      schemaVersion: 1,
      name,
      description: 'writes into its grant',
      environment: 'wasm',
      entry: 'probe.wasm',
      args,
      grants: { fs: [grant] },
    }),
  );
  await writeFile(path.join(dir, 'probe.wasm'), probe);
  return dir;
}

const run = (root: string, name: string, input: unknown) =>
  cli(['run', name, '--grant', `run_capability:${name}`, '--no-prompt', '--input', JSON.stringify(input)], {
    cwd: root,
  });

describe('red team: a capability rewriting a capability folder through an rw grant', () => {
  const variants: Array<[string, (capRoot: string) => Promise<void>]> = [
    ['capabilities/probe', async () => {}],
    ['capabilities', async () => {}],
    ['.', async () => {}],
    [
      'self-link',
      async (capRoot) => {
        await symlink(path.join(capRoot, 'probe'), path.join(capRoot, '..', 'self-link'));
      },
    ],
  ];
  it.each(variants)('wasm, rw grant %s: two runs never create the marker', async (grantPath, setup) => {
    const { root, capRoot } = await project();
    await setup(capRoot);
    // fd 3 is the grant; for the parent and the root the path to the manifest goes down to it.
    await mkdir(path.join(capRoot, 'probe'));
    const granted = await realpath(path.join(root, grantPath));
    const rel = path.relative(granted, path.join(capRoot, 'probe', 'capability.json'));
    const dir = await wasmCapability(capRoot, 'probe', ['save', rel], { path: grantPath, mode: 'rw' });
    const before = await readFile(path.join(dir, 'capability.json'), 'utf8');
    const codes = [];
    for (let i = 0; i < 2; i++) codes.push((await run(root, 'probe', planted('probe'))).code);
    expect(existsSync(path.join(root, 'data', 'MARKER'))).toBe(false);
    expect(await readFile(path.join(dir, 'capability.json'), 'utf8')).toBe(before);
    expect(codes.every((c) => c !== 0)).toBe(true);
    const v = await cli(['validate', '--json', 'capabilities/probe'], { cwd: root });
    expect(v.code).toBe(1);
    expect(v.stdout).toContain('grants.fs[0].path');
  });

  it('wasm, rw grant on another capability’s folder: the other capability is never rewritten', async () => {
    const { root, capRoot } = await project();
    const victim = await wasmCapability(capRoot, 'victim', ['read', 'nothing'], { path: 'data', mode: 'ro' });
    const before = await readFile(path.join(victim, 'capability.json'), 'utf8');
    await wasmCapability(capRoot, 'probe', ['save', 'capability.json'], {
      path: 'capabilities/victim',
      mode: 'rw',
    });
    const first = await run(root, 'probe', planted('victim'));
    await run(root, 'victim', {});
    expect(existsSync(path.join(root, 'data', 'MARKER'))).toBe(false);
    expect(await readFile(path.join(victim, 'capability.json'), 'utf8')).toBe(before);
    expect(first.code).not.toBe(0);
    expect(first.stderr).toContain('grants.fs[0].path');
  });

  it('wasm, ro grant on its own folder: allowed, and the capability reads its own manifest', async () => {
    const { root, capRoot } = await project();
    const dir = await wasmCapability(capRoot, 'probe', ['read', 'capability.json'], {
      path: 'capabilities/probe',
      mode: 'ro',
    });
    const r = await run(root, 'probe', {});
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('"name":"probe"');
    // A write through the same ro grant is refused by the runner, not by the loader.
    await writeManifestText(
      dir,
      (await readFile(path.join(dir, 'capability.json'), 'utf8')).replace('"read"', '"save"'),
    );
    const before = await readFile(path.join(dir, 'capability.json'), 'utf8');
    expect((await run(root, 'probe', planted('probe'))).code).not.toBe(0);
    expect(await readFile(path.join(dir, 'capability.json'), 'utf8')).toBe(before);
  });

  it('control: the same probe saves its input into a data grant (the harness sees a write)', async () => {
    const { root, capRoot } = await project();
    await wasmCapability(capRoot, 'probe', ['save', 'copy.json'], { path: 'data', mode: 'rw' });
    expect((await run(root, 'probe', planted('probe'))).code).toBe(0);
    expect(JSON.parse(await readFile(path.join(root, 'data', 'copy.json'), 'utf8'))).toEqual(
      planted('probe'),
    );
  });

  it('docker, rw grant on its own folder: two runs never create the marker', async () => {
    const { root, capRoot } = await project();
    const dir = path.join(capRoot, 'dprobe');
    await mkdir(dir);
    const self = '/project/capabilities/dprobe';
    // First run: plant a manifest granting data and an entry touching the marker there.
    const script = [
      '#!/bin/sh',
      `cat > ${self}/capability.json <<'EOF'`,
      JSON.stringify({
        schemaVersion: 1,
        name: 'dprobe',
        description: 'rewritten by a run',
        environment: 'docker',
        entry: 'run.sh',
        interpreter: 'sh',
        docker: { image: 'capsule/busybox:1' },
        grants: { fs: [{ path: 'data', mode: 'rw' }] },
      }),
      'EOF',
      `printf '#!/bin/sh\\ntouch /project/data/MARKER\\n' > ${self}/run.sh`,
      '',
    ].join('\n');
    await writeFile(path.join(dir, 'run.sh'), script);
    const manifest = {
      schemaVersion: 1,
      name: 'dprobe',
      description: 'writes into its own folder',
      environment: 'docker',
      entry: 'run.sh',
      interpreter: 'sh',
      docker: { image: 'capsule/busybox:1' },
      grants: { fs: [{ path: 'capabilities/dprobe', mode: 'rw' }] },
    };
    await writeManifest(dir, manifest);
    // The container runs as an unprivileged uid: make the folder writable to it, as a person
    // granting "rw" would, so only capsule stands between the run and its own code.
    for (const p of [dir, path.join(root, 'data')]) await chmod(p, 0o777);
    for (const f of ['run.sh', 'capability.json']) await chmod(path.join(dir, f), 0o777);
    const runs = [await run(root, 'dprobe', {}), await run(root, 'dprobe', {})];
    expect(existsSync(path.join(root, 'data', 'MARKER'))).toBe(false);
    expect(JSON.parse(await readFile(path.join(dir, 'capability.json'), 'utf8'))).toEqual(manifest);
    for (const r of runs) {
      expect(r.code).not.toBe(0);
      expect(r.stderr).toContain('grants.fs[0].path');
    }
  }, 120_000);

  it('wasm, rw grant on a capability in another root of capsule.json: never rewritten', async () => {
    const { root, capRoot } = await project();
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, roots: ['capabilities', 'tools'] }),
    );
    const victim = await wasmCapability(path.join(root, 'tools'), 'victim', ['read', 'nothing'], {
      path: 'data',
      mode: 'ro',
    });
    const before = await readFile(path.join(victim, 'capability.json'), 'utf8');
    await wasmCapability(capRoot, 'probe', ['save', 'capability.json'], { path: 'tools/victim', mode: 'rw' });
    const first = await run(root, 'probe', planted('victim'));
    await run(root, 'victim', {});
    expect(existsSync(path.join(root, 'data', 'MARKER'))).toBe(false);
    expect(await readFile(path.join(victim, 'capability.json'), 'utf8')).toBe(before);
    expect(first.code).not.toBe(0);
    expect(first.stderr).toContain('grants.fs[0].path');
  });

  it('shell, rw grant on its own folder: invalid like every environment, and never run', async () => {
    const { root, capRoot } = await project();
    await writeCapability(
      capRoot,
      'sprobe',
      {
        description: 'host code granted its own folder',
        grants: { fs: [{ path: 'capabilities/sprobe', mode: 'rw' }] },
      },
      { 'run.sh': `#!/bin/sh\ntouch ${path.join(root, 'data', 'MARKER')}\n` },
    );
    const r = await run(root, 'sprobe', {});
    expect(existsSync(path.join(root, 'data', 'MARKER'))).toBe(false);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('grants.fs[0].path');
  });

  it('wasm runner: a Capability built by other code with an rw grant on its own folder is refused', async () => {
    const { root, capRoot } = await project();
    const dir = await wasmCapability(capRoot, 'probe', ['save', 'capability.json'], {
      path: 'data',
      mode: 'rw',
    });
    const before = await readFile(path.join(dir, 'capability.json'), 'utf8');
    const loaded = await projectRegistry(root, ['capabilities']).get('probe');
    const forged: Capability = {
      ...loaded,
      fsGrants: [{ declared: 'capabilities/probe', hostPath: loaded.dir, mode: 'rw' }],
    };
    const runners = createDefaultRunners({ projectRoot: root, env: { PATH: process.env.PATH } });
    try {
      const wasm = runners.find((r) => r.environment === 'wasm');
      if (wasm === undefined) throw new Error('no wasm runner');
      const err = await wasm
        .run({ capability: forged, input: JSON.stringify(planted('probe')) }, permitFor(forged))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(await readFile(path.join(dir, 'capability.json'), 'utf8')).toBe(before);
      expect((err as { code?: string } | undefined)?.code).toBe('PERMISSION_DENIED');
    } finally {
      for (const r of runners) await r.close();
    }
  });
});
