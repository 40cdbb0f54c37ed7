import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import wabtInit from 'wabt';
import { afterEach, describe, expect, it } from 'vitest';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import { permitFor } from '../../../helpers/permit.js';
import { wasmCapability } from './helpers.js';

// The executor hints a Wasm capability's preload while its call is judged (before the permit): reading
// and compiling, from capsule's verified disk cache only. These check by effect that the hint runs and
// writes nothing, and that a run still runs the bytes it reads itself.

const REPO = path.resolve(new URL('../../../../', import.meta.url).pathname);
const HELLO = readFileSync(path.join(REPO, 'capabilities/hello/hello.wasm'));
const wabt = await wabtInit();

/** A WASI command that prints `text` and exits 0. */
function printer(text: string): Uint8Array {
  const data = JSON.stringify(text).slice(1, -1);
  const wat = `(module
    (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 16) "${data}")
    (func (export "_start")
      (i32.store (i32.const 0) (i32.const 16))
      (i32.store (i32.const 4) (i32.const ${Buffer.byteLength(text)}))
      (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`;
  return wabt.parseWat('printer.wat', wat).toBinary({}).buffer;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

async function scratchCache(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'capsule-preload-cache-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function runner(cacheDir: string): WasmRunner {
  const r = new WasmRunner({ cacheDir, poolSize: 1 });
  cleanups.push(() => r.close());
  return r;
}

async function filesUnder(dir: string): Promise<string[]> {
  if (!existsSync(dir)) return [];
  return (await readdir(dir, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile())
    .map((e) => path.join(e.parentPath, e.name));
}

describe('the Wasm runner preload (before the permit)', () => {
  it('a component not in the disk cache is left to the run: the preload transpiles and writes nothing', async () => {
    const cacheDir = await scratchCache();
    const { capability } = await wasmCapability('hello', HELLO);
    const wasm = runner(cacheDir);
    await wasm.preload(capability);
    expect(await filesUnder(cacheDir)).toEqual([]);
    // The run after the permit transpiles it (and keeps it), as without the preload.
    const r = await wasm.run({ capability, input: '{"name":"preload"}' }, permitFor(capability));
    expect(r).toMatchObject({ exitCode: 0, stdout: 'Hello, preload!\n' });
    expect((await filesUnder(cacheDir)).length).toBeGreaterThan(0);
  });

  it('a component in the disk cache is prepared ahead, and its run gives the same answer', async () => {
    const cacheDir = await scratchCache();
    const { capability } = await wasmCapability('hello', HELLO);
    const first = runner(cacheDir);
    await first.run({ capability, input: '{"name":"one"}' }, permitFor(capability));
    const cached = await filesUnder(cacheDir);
    // A new process (a new runner) over the same cache: the preload reads and checks it, writing nothing.
    const second = runner(cacheDir);
    await second.preload(capability);
    expect(await filesUnder(cacheDir)).toEqual(cached);
    const r = await second.run({ capability, input: '{"name":"two"}' }, permitFor(capability));
    expect(r).toMatchObject({ exitCode: 0, stdout: 'Hello, two!\n' });
  });

  it('bytes swapped after the preload: the run runs the bytes it reads, never the preloaded ones', async () => {
    const cacheDir = await scratchCache();
    const { capability } = await wasmCapability('swap', printer('preloaded\n'));
    const wasm = runner(cacheDir);
    await wasm.preload(capability);
    await writeFile(capability.entryPath, printer('swapped in\n'));
    const r = await wasm.run({ capability, input: '' }, permitFor(capability));
    expect(r).toMatchObject({ exitCode: 0, stdout: 'swapped in\n' });
  });
});
