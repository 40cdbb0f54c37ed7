import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, realpath } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENTRY_BYTES } from '../../../../src/runners/wasm/confined-dir.js';
import { componentizeJs } from '../../../../src/runners/wasm/componentize.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import type { WasmRunSpec } from '../../../../src/runners/wasm/wasm-runner.js';
import { assemble, FIXTURES, rawSpec, wasmCapability } from './helpers.js';
import { permitFor } from '../../../helpers/permit.js';

// A guest with a rw grant cannot fill the user's disk: every byte it writes, and every byte a file
// grows by (set-size, allocate, a write past the end), counts against limits.writeBytes. Judged on
// the host: how large the file the guest wrote really is.

const runner = new WasmRunner({ poolSize: 1 });
afterAll(() => runner.close());
const probe = assemble('probe.wat');
let fsprobe: Uint8Array;
beforeAll(async () => {
  const source = readFileSync(new URL('fsprobe/fsprobe.js', FIXTURES), 'utf8');
  fsprobe = (await componentizeJs(source, { file: 'fsprobe.js' })).component;
}, 60_000);

const CAP = 1024 * 1024 + 123;
const NOSPC = 51;
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

async function grant(): Promise<string> {
  const base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-wcap-')));
  const dir = path.join(base, 'out');
  await mkdir(dir);
  return dir;
}

function module(args: string[], dir: string, extra: Partial<WasmRunSpec> = {}): WasmRunSpec {
  return rawSpec('probe.wasm', probe, '', {
    args,
    dirs: [{ hostPath: dir, guestPath: '/out', mode: 'rw' }],
    timeoutMs: 20_000,
    memoryMb: 16,
    outputBytes: 64 * 1024,
    writeBytes: CAP,
    ...extra,
  });
}

async function component(dir: string, ops: Array<Record<string, unknown>>, writeBytes = CAP) {
  const r = await runner.runRaw({
    file: 'fsprobe.wasm',
    bytes: fsprobe,
    programName: 'fsprobe',
    args: [],
    env: {},
    input: Buffer.from(JSON.stringify({ ops })),
    dirs: [{ hostPath: dir, guestPath: '/out', mode: 'rw' }],
    timeoutMs: 20_000,
    memoryMb: 64,
    outputBytes: 64 * 1024,
    writeBytes,
  });
  expect(r.exitCode, text(r.stderr)).toBe(0);
  return { result: r, outcomes: JSON.parse(text(r.stdout)) as unknown[] };
}

describe('limits.writeBytes: preview1', () => {
  it('stops a guest that writes in a loop at the cap: the file on the host holds the cap, less its entry', async () => {
    const dir = await grant();
    const r = await runner.runRaw(module(['Fill', 'big.bin'], dir));
    // The last block only partly fits (a short write), the next one is ENOSPC.
    expect(text(r.stderr)).toBe(`errno=${NOSPC}\n`);
    expect(r.exitCode).toBe(NOSPC);
    expect(r.writeLimited).toBe(true);
    expect(statSync(path.join(dir, 'big.bin')).size).toBe(CAP - ENTRY_BYTES);
  });

  it('refuses set-size to 1 TiB: the file stays empty (no sparse giant appears)', async () => {
    const dir = await grant();
    const r = await runner.runRaw(module(['Zsize', 'sparse.bin'], dir));
    expect(r.exitCode).toBe(NOSPC);
    expect(r.writeLimited).toBe(true);
    expect(statSync(path.join(dir, 'sparse.bin')).size).toBe(0);
  });

  it('refuses a write that starts 1 TiB past the end: the hole counts too', async () => {
    const dir = await grant();
    const r = await runner.runRaw(module(['Pwrite', 'hole.bin'], dir));
    expect(r.exitCode).toBe(NOSPC);
    expect(statSync(path.join(dir, 'hole.bin')).size).toBe(0);
  });

  it('leaves a run under the cap alone (no writeLimited)', async () => {
    const dir = await grant();
    const r = await runner.runRaw(module(['write', 'small.txt'], dir));
    expect(r.exitCode).toBe(0);
    expect(r.writeLimited).toBeUndefined();
    expect(readFileSync(path.join(dir, 'small.txt'), 'utf8')).toBe('pwned');
  });

  it("takes the cap from the manifest's limits.writeBytes", async () => {
    const { capability, root } = await wasmCapability('filler', probe, {
      manifest: {
        args: ['Fill', 'f.bin'],
        limits: { writeBytes: 300_000 },
        grants: { fs: [{ path: 'out', mode: 'rw' }] },
      },
      projectFiles: { 'out/.keep': '' },
    });
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.exitCode).toBe(NOSPC);
    expect(r.writeLimited).toBe(true);
    expect(statSync(path.join(root, 'out', 'f.bin')).size).toBe(300_000 - ENTRY_BYTES);
  });
});

describe('limits.writeBytes: components', () => {
  it('stops descriptor.write in a loop at the cap with insufficient-space', async () => {
    const dir = await grant();
    const { result, outcomes } = await component(dir, [{ op: 'fill', pre: '/out', path: 'big.bin' }]);
    expect(outcomes).toEqual([{ err: 'insufficient-space' }]);
    expect(result.writeLimited).toBe(true);
    expect(statSync(path.join(dir, 'big.bin')).size).toBe(CAP - ENTRY_BYTES);
  });

  it('stops an output stream in a loop at the cap', async () => {
    const dir = await grant();
    const { outcomes } = await component(dir, [{ op: 'fill', pre: '/out', path: 'big.bin', stream: true }]);
    expect(outcomes).toEqual([{ err: 'insufficient-space' }]);
    expect(statSync(path.join(dir, 'big.bin')).size).toBeLessThanOrEqual(CAP);
  });

  it('refuses set-size to 1 TiB, and the budget is shared by every file of the call', async () => {
    const dir = await grant();
    // Each new file is one entry (ENTRY_BYTES): after three, 10 bytes are left.
    const { outcomes } = await component(dir, [
      { op: 'setSize', pre: '/out', path: 'sparse.bin', size: 2 ** 40 },
      { op: 'setSize', pre: '/out', path: 'a.bin', size: CAP - 3 * ENTRY_BYTES - 10 },
      { op: 'setSize', pre: '/out', path: 'b.bin', size: 11 },
      { op: 'write', pre: '/out', path: 'a.bin', text: 'x' },
      { op: 'write', pre: '/out', path: 'c.txt', text: 'x' },
    ]);
    expect(outcomes).toEqual([
      { err: 'insufficient-space' },
      { ok: 'resized' },
      { err: 'insufficient-space' },
      { ok: 'written' },
      { err: 'insufficient-space' },
    ]);
    expect(statSync(path.join(dir, 'sparse.bin')).size).toBe(0);
    expect(statSync(path.join(dir, 'b.bin')).size).toBe(0);
    expect(readFileSync(path.join(dir, 'a.bin'), 'utf8')).toBe('x');
    expect(existsSync(path.join(dir, 'c.txt'))).toBe(false);
  });

  it('counts new entries too: a guest making folders and symlinks in a loop stops at the cap', async () => {
    const dir = await grant();
    const many = Array.from({ length: 8 }, (_, i) => ({ op: 'mkdir', pre: '/out', path: `d${i}` }));
    const { outcomes } = await component(
      dir,
      [...many, { op: 'symlink', pre: '/out', target: 'x'.repeat(2000), path: 'long' }],
      5 * ENTRY_BYTES + 1000,
    );
    expect(outcomes).toEqual([
      ...many.slice(0, 5).map(() => ({ ok: 'made' })),
      ...many.slice(5).map(() => ({ err: 'insufficient-space' })),
      { err: 'insufficient-space' },
    ]);
    expect(readdirSync(dir).sort()).toEqual(['d0', 'd1', 'd2', 'd3', 'd4']);
  });
});
