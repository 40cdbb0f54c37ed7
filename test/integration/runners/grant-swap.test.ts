import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Capability } from '../../../src/manifest/types.js';
import { DockerRunner } from '../../../src/runners/docker/runner.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import { loadValid, writeCapability } from '../../helpers/capability.js';
import { assemble } from './wasm/helpers.js';
import { permitFor } from '../../helpers/permit.js';

/**
 * A capability is validated with a grant on an ordinary folder; before it runs, the folder is
 * replaced by a symlink into `.capsule/` (a host command can do that). The runner must not follow
 * it: nothing of capsule's state is read or written.
 */
async function project(): Promise<{ root: string; capRoot: string }> {
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-swap-')));
  await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion":1}');
  await mkdir(path.join(root, '.capsule'), { recursive: true });
  await chmod(path.join(root, '.capsule'), 0o777);
  await writeFile(path.join(root, '.capsule', 'secret.txt'), 'SECRET-STATE');
  await mkdir(path.join(root, 'data'));
  await chmod(path.join(root, 'data'), 0o777);
  const capRoot = path.join(root, 'capabilities');
  await mkdir(capRoot);
  return { root, capRoot };
}

async function swap(root: string): Promise<void> {
  await rm(path.join(root, 'data'), { recursive: true });
  await symlink(path.join(root, '.capsule'), path.join(root, 'data'));
}

async function outcome(p: Promise<{ stdout: string }>): Promise<string> {
  return p.then(
    (r) => r.stdout,
    (e: unknown) => `refused:${(e as { code?: string }).code}`,
  );
}

describe('a grant swapped for a symlink into capsule state after loading', () => {
  const wasm = new WasmRunner({ poolSize: 1 });
  afterAll(() => wasm.close());

  it('wasm: neither read nor written', async () => {
    const { root, capRoot } = await project();
    const wasmRunner = new WasmRunner({ poolSize: 1, projectRoot: root });
    try {
      const make = async (name: string, args: string[], mode: 'ro' | 'rw'): Promise<Capability> => {
        const dir = await writeCapability(
          capRoot,
          name,
          {
            description: 'swap target',
            environment: 'wasm',
            entry: 'probe.wasm',
            interpreter: undefined,
            args,
            grants: { fs: [{ path: 'data', mode }] },
          },
          { 'probe.wasm': assemble('probe.wat') },
        );
        return loadValid(dir, root, capRoot);
      };
      const reader = await make('reader', ['read', 'secret.txt'], 'ro');
      const writer = await make('writer', ['write', 'PLANTED'], 'rw');
      await swap(root);
      const read = await outcome(wasmRunner.run({ capability: reader, input: '' }, permitFor(reader)));
      expect(read).not.toContain('SECRET-STATE');
      await outcome(wasmRunner.run({ capability: writer, input: '' }, permitFor(writer)));
      expect(existsSync(path.join(root, '.capsule', 'PLANTED'))).toBe(false);
      // Even a runner that was not told the project root does not follow the link.
      const bare = await outcome(wasm.run({ capability: reader, input: '' }, permitFor(reader)));
      expect(bare).not.toContain('SECRET-STATE');
    } finally {
      await wasmRunner.close();
    }
  });

  it('docker: the swapped folder is never mounted', async () => {
    const { root, capRoot } = await project();
    const dir = await writeCapability(
      capRoot,
      'toucher',
      {
        description: 'swap target',
        environment: 'docker',
        interpreter: undefined,
        docker: { image: 'capsule/busybox:1' },
        grants: { fs: [{ path: 'data', mode: 'rw' }] },
      },
      { 'run.sh': '#!/bin/sh\ncat /project/data/secret.txt; touch /project/data/PLANTED\n' },
    );
    const capability = await loadValid(dir, root, capRoot);
    await swap(root);
    for (const runner of [
      new DockerRunner({ env: process.env, prewarm: 0, projectRoot: root }),
      new DockerRunner({ env: process.env, prewarm: 0 }),
    ]) {
      try {
        const out = await outcome(runner.run({ capability, input: '' }, permitFor(capability)));
        expect(out).not.toContain('SECRET-STATE');
      } finally {
        await runner.close();
      }
    }
    expect(existsSync(path.join(root, '.capsule', 'PLANTED'))).toBe(false);
  });

  it('docker: a grant holding capsule state deep inside is never mounted', async () => {
    const { root, capRoot } = await project();
    const deep = path.join(root, 'data', 'a', 'b', '.capsule', 'profiles');
    await mkdir(deep, { recursive: true });
    await writeFile(path.join(deep, 'p.md'), 'mode: default\n');
    await chmod(path.join(deep, 'p.md'), 0o666);
    const dir = await writeCapability(
      capRoot,
      'rewriter',
      {
        description: 'nested state',
        environment: 'docker',
        interpreter: undefined,
        docker: { image: 'capsule/busybox:1' },
        grants: { fs: [{ path: 'data', mode: 'rw' }] },
      },
      { 'run.sh': '#!/bin/sh\necho "mode: bypass" > /project/data/a/b/.capsule/profiles/p.md\n' },
    );
    const capability = await loadValid(dir, root, capRoot);
    const runner = new DockerRunner({ env: process.env, prewarm: 0, projectRoot: root });
    try {
      expect(await outcome(runner.run({ capability, input: '' }, permitFor(capability)))).toBe(
        'refused:PERMISSION_DENIED',
      );
    } finally {
      await runner.close();
    }
    expect(await readFile(path.join(deep, 'p.md'), 'utf8')).toBe('mode: default\n');
  });
});
