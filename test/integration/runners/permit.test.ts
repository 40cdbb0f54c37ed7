import { existsSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Capability } from '../../../src/manifest/types.js';
import { LazyRunner } from '../../../src/runners/lazy-runner.js';
import type { RunnerPermit } from '../../../src/runners/permit.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import type { Runner } from '../../../src/runners/types.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import { loadValid, tempProject, writeCapability } from '../../helpers/capability.js';
import { permitFor } from '../../helpers/permit.js';
import { assemble, wasmCapability } from './wasm/helpers.js';

// A runner runs only with a permit the executor minted for exactly that capability, once. Every attack is
// judged by its effect: the file the capability would create is not there.

interface Fixture {
  /** The capability as loaded from its folder now (a fresh object each time). */
  load(): Promise<Capability>;
  /** The capability's marker: created only when it really ran. */
  marker: string;
}

const probe = assemble('probe.wat');

/** A capability `name` of `kind` that creates its marker when it runs. */
async function fixture(kind: 'shell' | 'wasm', name: string): Promise<Fixture> {
  if (kind === 'shell') {
    const { root, capRoot } = await tempProject('capsule-runner-permit-');
    const marker = path.join(root, `${name}.marker`);
    const dir = await writeCapability(capRoot, name, {}, { 'run.sh': `touch '${marker}'\n` });
    return { load: () => loadValid(dir, root, capRoot), marker };
  }
  const made = await wasmCapability(name, probe, {
    manifest: { args: ['write', `${name}.marker`], grants: { fs: [{ path: 'out', mode: 'rw' }] } },
    projectFiles: { 'out/.keep': '' },
  });
  const capRoot = path.join(made.root, 'capabilities');
  return {
    load: () => loadValid(made.capability.dir, made.root, capRoot),
    marker: path.join(made.root, 'out', `${name}.marker`),
  };
}

const shell = new ShellRunner();
const wasm = new WasmRunner({ poolSize: 1 });
const lazyShell = new LazyRunner('shell', async () => new ShellRunner());
afterAll(async () => {
  await Promise.all([shell.close(), wasm.close(), lazyShell.close()]);
});

const cases: Array<{ runner: string; kind: 'shell' | 'wasm'; get: () => Runner }> = [
  { runner: 'ShellRunner', kind: 'shell', get: () => shell },
  { runner: 'WasmRunner', kind: 'wasm', get: () => wasm },
  { runner: 'LazyRunner (shell)', kind: 'shell', get: () => lazyShell },
];

describe.each(cases)('$runner runs only with a genuine permit for what it runs', ({ kind, get }) => {
  const refused = { code: 'PERMISSION_DENIED', details: { key: expect.stringMatching(/^run_capability:/) } };

  it('control: a permit minted for the capability runs it (the marker is created)', async () => {
    const f = await fixture(kind, 'ok');
    const capability = await f.load();
    const r = await get().run({ capability, input: '{}' }, permitFor(capability));
    expect(r.exitCode).toBe(0);
    expect(existsSync(f.marker)).toBe(true);
  });

  it('a forged permit (an object literal naming the capability and its hash) runs nothing', async () => {
    const f = await fixture(kind, 'forged');
    const capability = await f.load();
    const forged = {
      capability: capability.name,
      contentHash: capability.contentHash,
    } as unknown as RunnerPermit;
    await expect(get().run({ capability, input: '{}' }, forged)).rejects.toMatchObject(refused);
    expect(existsSync(f.marker)).toBe(false);
  });

  it('a copy of a genuine permit runs nothing (only the minted object counts)', async () => {
    const f = await fixture(kind, 'copied');
    const capability = await f.load();
    const copy = { ...permitFor(capability) };
    await expect(get().run({ capability, input: '{}' }, copy)).rejects.toMatchObject(refused);
    expect(existsSync(f.marker)).toBe(false);
  });

  it('a permit for another capability runs nothing', async () => {
    const allowed = await fixture(kind, 'allowed');
    const other = await fixture(kind, 'other');
    const permit = permitFor(await allowed.load());
    const capability = await other.load();
    await expect(get().run({ capability, input: '{}' }, permit)).rejects.toMatchObject({
      ...refused,
      message: expect.stringMatching(/permit is for allowed/),
    });
    expect(existsSync(other.marker)).toBe(false);
    expect(existsSync(allowed.marker)).toBe(false);
  });

  it('a permit runs once: the second run with it runs nothing', async () => {
    const f = await fixture(kind, 'reused');
    const capability = await f.load();
    const permit = permitFor(capability);
    await get().run({ capability, input: '{}' }, permit);
    expect(existsSync(f.marker)).toBe(true);
    await rm(f.marker);
    await expect(get().run({ capability, input: '{}' }, permit)).rejects.toMatchObject({
      ...refused,
      message: expect.stringMatching(/already used/),
    });
    expect(existsSync(f.marker)).toBe(false);
  });

  it('a permit for the capability as it was runs nothing once its content changed', async () => {
    const f = await fixture(kind, 'changed');
    const before = await f.load();
    const permit = permitFor(before);
    // A file added to the folder: a new content hash for the same name.
    await writeFile(path.join(before.dir, 'added.txt'), 'changed after the permit\n');
    const after = await f.load();
    expect(after.contentHash).not.toBe(before.contentHash);
    await expect(get().run({ capability: after, input: '{}' }, permit)).rejects.toMatchObject(refused);
    expect(existsSync(f.marker)).toBe(false);
    // The permitted object itself, its hash rewritten to the new one: refused too.
    before.contentHash = after.contentHash;
    await expect(get().run({ capability: before, input: '{}' }, permit)).rejects.toMatchObject({
      ...refused,
      message: expect.stringMatching(/content changed/),
    });
    expect(existsSync(f.marker)).toBe(false);
  });

  it('a permit for the capability runs nothing when another field of it changed (its entry)', async () => {
    const f = await fixture(kind, 'swapped');
    const capability = await f.load();
    const permit = permitFor(capability);
    capability.manifest = { ...capability.manifest, args: [...capability.manifest.args, 'extra'] };
    await expect(get().run({ capability, input: '{}' }, permit)).rejects.toMatchObject(refused);
    expect(existsSync(f.marker)).toBe(false);
  });

  it('no permit at all runs nothing', async () => {
    const f = await fixture(kind, 'none');
    const capability = await f.load();
    await expect(
      get().run({ capability, input: '{}' }, undefined as unknown as RunnerPermit),
    ).rejects.toMatchObject(refused);
    expect(existsSync(f.marker)).toBe(false);
  });
});
