import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import wabtInit from 'wabt';
import { describe, expect, it } from 'vitest';
import { createDefaultRunners } from '../../../src/runtime/runners.js';
import type { Capability } from '../../../src/manifest/types.js';
import { projectRegistry } from '../../../src/runtime/runtime.js';
import { cli } from '../../helpers/cli.js';
import { tempProject, writeCapability, writeManifest } from '../../helpers/capability.js';
import { permitFor } from '../../helpers/permit.js';

const wabt = await wabtInit();
const probe = wabt
  .parseWat('probe.wat', readFileSync(new URL('../../../fixtures/wasm/probe.wat', import.meta.url), 'utf8'))
  .toBinary({}).buffer;

/**
 * A project whose per-user state folder (CAPSULE_STATE_DIR) lies inside it, as in a CI job that keeps
 * state in the workspace or a project at the home folder, and a wasm capability that writes a file
 * into the folder it is granted.
 */
async function project(grant: string, mode: 'ro' | 'rw'): Promise<{ root: string; env: NodeJS.ProcessEnv }> {
  const { root, capRoot } = await tempProject('capsule-redteam-state-');
  const stateDir = path.join(root, 'state', 'capsule');
  await mkdir(path.join(stateDir, 'audit-heads'), { recursive: true });
  // A path inside the granted folder: FORGED in the state folder itself when the grant holds it.
  const fromGrant = path.relative(path.join(root, grant), stateDir);
  const target = fromGrant.startsWith('..') ? 'FORGED' : path.join(fromGrant, 'FORGED');
  await writeCapability(
    capRoot,
    'stomp',
    {
      description: 'writes into the folder it is granted',
      environment: 'wasm',
      entry: 'stomp.wasm',
      interpreter: undefined,
      args: ['write', target],
      grants: { fs: [{ path: grant, mode }] },
    },
    { 'stomp.wasm': probe },
  );
  return { root, env: { ...process.env, CAPSULE_STATE_DIR: stateDir } };
}

describe('no grant reaches the per-user state folder when it lies inside the project', () => {
  it.each([
    ['state', 'rw'],
    ['state/capsule', 'rw'],
    ['state/capsule/audit-heads', 'rw'],
  ] as const)('grants.fs %s (%s): the capability is refused and writes nothing', async (grant, mode) => {
    const { root, env } = await project(grant, mode);
    const r = await cli(['run', 'stomp', '--grant', 'run_capability:stomp', '--no-prompt'], {
      cwd: root,
      env,
    });
    expect(existsSync(path.join(root, 'state', 'capsule', 'FORGED')), r.stdout + r.stderr).toBe(false);
    expect(existsSync(path.join(root, 'state', 'capsule', 'audit-heads', 'FORGED'))).toBe(false);
    expect(r.code).not.toBe(0);
    const v = await cli(['validate'], { cwd: root, env });
    expect(v.code).toBe(1);
  });

  it('the same capability granted a folder beside it runs and writes (the harness sees a write)', async () => {
    const { root, env } = await project('data', 'rw');
    await mkdir(path.join(root, 'data'));
    const cap = path.join(root, 'capabilities', 'stomp', 'capability.json');
    const manifest = JSON.parse(readFileSync(cap, 'utf8')) as { args: string[] };
    manifest.args = ['write', 'FORGED'];
    await writeManifest(path.dirname(cap), manifest);
    const r = await cli(['run', 'stomp', '--grant', 'run_capability:stomp', '--no-prompt'], {
      cwd: root,
      env,
    });
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(path.join(root, 'data', 'FORGED'))).toBe(true);
  });
});

describe('no grant reads the per-user key', () => {
  const CANARY = 'canary-in-the-secret-folder';

  /** A wasm capability that prints `file` of the folder it is granted (read-only). */
  async function reader(grant: string, file: string): Promise<{ root: string; env: NodeJS.ProcessEnv }> {
    const { root, env } = await project(grant, 'ro');
    const secret = path.join(root, 'state', 'capsule', 'secret');
    await mkdir(secret, { recursive: true, mode: 0o700 });
    await writeFile(path.join(secret, 'canary'), CANARY);
    await mkdir(path.join(root, 'data'), { recursive: true });
    await writeFile(path.join(root, 'data', 'canary'), CANARY);
    const cap = path.join(root, 'capabilities', 'stomp', 'capability.json');
    const manifest = JSON.parse(readFileSync(cap, 'utf8')) as { args: string[] };
    manifest.args = ['read', file];
    await writeManifest(path.dirname(cap), manifest);
    return { root, env };
  }

  it.each([
    ['state/capsule/secret', 'canary'],
    ['state/capsule', 'secret/canary'],
    ['state', 'capsule/secret/canary'],
  ])('grants.fs %s (ro): refused, the folder of the key is never read', async (grant, file) => {
    const { root, env } = await reader(grant, file);
    const r = await cli(['run', 'stomp', '--grant', 'run_capability:stomp', '--no-prompt'], {
      cwd: root,
      env,
    });
    expect(r.stdout).not.toContain(CANARY);
    expect(r.code).not.toBe(0);
  });

  it('control: the same reader granted a data folder prints what it reads', async () => {
    const { root, env } = await reader('data', 'canary');
    const r = await cli(['run', 'stomp', '--grant', 'run_capability:stomp', '--no-prompt'], {
      cwd: root,
      env,
    });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(CANARY);
  });

  it('wasm runner: a Capability built by other code with a grant on the key folder is refused', async () => {
    const { root } = await reader('data', 'canary');
    const stateDir = path.join(root, 'state', 'capsule');
    const loaded = await projectRegistry(root, ['capabilities']).get('stomp');
    const forged: Capability = {
      ...loaded,
      fsGrants: [{ declared: 'state/capsule/secret', hostPath: path.join(stateDir, 'secret'), mode: 'ro' }],
    };
    const runWith = async (state: string): Promise<{ stdout: string; code?: string }> => {
      const runners = createDefaultRunners({
        projectRoot: root,
        env: { PATH: process.env.PATH },
        stateDir: state,
      });
      try {
        const wasm = runners.find((r) => r.environment === 'wasm');
        if (wasm === undefined) throw new Error('no wasm runner');
        return await wasm.run({ capability: forged, input: '' }, permitFor(forged)).then(
          (res) => ({ stdout: res.stdout }),
          (e: unknown) => ({ stdout: '', code: (e as { code?: string }).code }),
        );
      } finally {
        for (const r of runners) await r.close();
      }
    };
    const refused = await runWith(stateDir);
    expect(refused.stdout).not.toContain(CANARY);
    expect(refused.code).toBe('PERMISSION_DENIED');
    // Control: a runner told of another state folder runs it (its own check is what refused it above).
    const other = await runWith(path.join(root, 'elsewhere'));
    expect(other.stdout).toContain(CANARY);
  });
});

describe('docker runner: no grant mounts the per-user state folder', () => {
  it('a Capability built by other code with a grant on the key folder is refused; control: runs when told of another', async () => {
    const { root, capRoot } = await tempProject('capsule-redteam-state-docker-');
    const stateDir = path.join(root, 'state', 'capsule');
    const secret = path.join(stateDir, 'secret');
    await mkdir(secret, { recursive: true, mode: 0o700 });
    await writeFile(path.join(secret, 'canary'), 'docker-canary-in-the-secret-folder', { mode: 0o644 });
    await chmod(secret, 0o755); // so the container's unprivileged user could read it, were it mounted
    await mkdir(path.join(root, 'data'));
    await writeCapability(
      capRoot,
      'dpeek',
      {
        description: 'prints a file of its grant',
        environment: 'docker',
        docker: { image: 'capsule/busybox:1' },
        grants: { fs: [{ path: 'data', mode: 'ro' }] },
      },
      { 'run.sh': '#!/bin/sh\ncat /project/state/capsule/secret/canary\n' },
    );
    const loaded = await projectRegistry(root, ['capabilities']).get('dpeek');
    const forged: Capability = {
      ...loaded,
      fsGrants: [{ declared: 'state/capsule/secret', hostPath: secret, mode: 'ro' }],
    };
    const runWith = async (state: string): Promise<{ stdout: string; code?: string }> => {
      const runners = createDefaultRunners({
        projectRoot: root,
        env: { PATH: process.env.PATH },
        stateDir: state,
      });
      try {
        const docker = runners.find((r) => r.environment === 'docker');
        if (docker === undefined) throw new Error('no docker runner');
        return await docker.run({ capability: forged, input: '' }, permitFor(forged)).then(
          (res) => ({ stdout: res.stdout }),
          (e: unknown) => ({ stdout: '', code: (e as { code?: string }).code }),
        );
      } finally {
        for (const r of runners) await r.close();
      }
    };
    const refused = await runWith(stateDir);
    expect(refused.stdout).not.toContain('docker-canary');
    expect(refused.code).toBe('PERMISSION_DENIED');
    const other = await runWith(path.join(root, 'elsewhere'));
    expect(other.stdout).toContain('docker-canary-in-the-secret-folder');
  }, 120_000);
});
