import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import wabtInit from 'wabt';
import { componentizeJs } from '../../../../src/runners/wasm/componentize.js';
import { TRAP_EXIT_CODE } from '../../../../src/runners/wasm/protocol.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import type { WasmRunSpec } from '../../../../src/runners/wasm/wasm-runner.js';
import { assemble, rawSpec } from './helpers.js';

// One worker: every call below lands in the same thread, which keeps the compiled code between
// calls. Whatever a call leaves behind must still be gone for the next one.
const runner = new WasmRunner({ poolSize: 1 });
afterAll(() => runner.close());

const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

describe('WasmRunner: a fresh instance per call (preview1)', () => {
  // Byte 60000 is covered by no data segment: only a memory zeroed (or new) for each call reads 0
  // there after a call wrote 9. The calls alternate between keeping and growing the memory.
  it('a call that rewrites its memory and globals, grows memory or not, and traps leaves nothing for the next', async () => {
    const wasm = assemble('leave-state.wat');
    for (let i = 0; i < 8; i++) {
      const env: Record<string, string> = i % 3 === 2 ? { GROW: '1' } : {};
      const r = await runner.runRaw(rawSpec('leave-state.wasm', wasm, '', { env }));
      expect(text(r.stdout), `call ${i}`).toBe('m=A g=7 p=1 h=0\n');
      expect(r.exitCode).toBe(TRAP_EXIT_CODE);
    }
  });
});

describe('WasmRunner: code kept per worker', () => {
  it('runs the right code after its worker dropped it for newer ones (more modules than it keeps)', async () => {
    const wabt = await wabtInit();
    // 40 distinct modules (a worker keeps 32), each printing its own number.
    const modules = Array.from({ length: 40 }, (_, i) => {
      const digits = String(i).padStart(2, '0');
      const wat = `(module
        (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
        (memory (export "memory") 1)
        (data (i32.const 16) "${digits}")
        (func (export "_start")
          (i32.store (i32.const 0) (i32.const 16))
          (i32.store (i32.const 4) (i32.const 2))
          (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`;
      return { digits, bytes: wabt.parseWat(`m${digits}.wat`, wat).toBinary({}).buffer };
    });
    for (const round of [0, 1])
      for (const m of modules) {
        const r = await runner.runRaw(rawSpec(`m${m.digits}.wasm`, m.bytes, ''));
        expect(text(r.stdout), `round ${round}`).toBe(m.digits);
      }
  });
});

describe('WasmRunner: a fresh instance per call (components)', () => {
  // Reports what it starts with; asked to, it then rewrites JS globals and built-ins, keeps a big
  // allocation alive, and returns or throws.
  const source = `
    let calls = 0;
    export function run(input) {
      calls += 1;
      const seen = JSON.stringify({
        calls,
        mark: globalThis.mark ?? null,
        proto: typeof Object.prototype.hijacked,
        upper: 'abc'.toUpperCase(),
        hog: typeof globalThis.hog,
      });
      if (input === 'look') return seen;
      globalThis.mark = 'left behind';
      Object.prototype.hijacked = 1;
      String.prototype.toUpperCase = () => 'HIJACKED';
      globalThis.hog = new Array(100000).fill(1.5);
      const stringify = JSON.stringify;
      JSON.stringify = () => 'HIJACKED';
      if (input === 'corrupt-and-throw') throw new Error('after corrupting');
      if (input === 'corrupt-and-oom') { const a = []; for (;;) a.push(new Array(100000).fill(2.5)); }
      return stringify({ corrupted: true });
    }`;
  const clean = '{"calls":1,"mark":null,"proto":"undefined","upper":"ABC","hog":"undefined"}';
  let component: Uint8Array;
  beforeAll(async () => {
    component = (await componentizeJs(source, { file: 'leave-state.js' })).component;
  });
  const call = (input: string, extra: Partial<WasmRunSpec> = {}) =>
    runner.runRaw(rawSpec('leave-state.wasm', component, input, extra));

  it('a module-level counter starts at its initial value on every call', async () => {
    for (let i = 0; i < 3; i++) expect(text((await call('look')).stdout)).toBe(clean);
  });

  it('globals and built-ins rewritten by one call are pristine in the next (returned normally)', async () => {
    const bad = await call('corrupt');
    expect(text(bad.stdout)).toBe('{"corrupted":true}');
    expect(text((await call('look')).stdout)).toBe(clean);
  });

  it('the same after a call that corrupts and then throws', async () => {
    const bad = await call('corrupt-and-throw');
    expect(bad.exitCode).not.toBe(0);
    expect(text(bad.stderr)).toMatch(/after corrupting/);
    expect(text((await call('look')).stdout)).toBe(clean);
  });

  it('the same after a call that corrupts and then runs out of its memory cap', async () => {
    const bad = await call('corrupt-and-oom', { memoryMb: 48 });
    expect(bad.oomKilled).toBe(true);
    expect(text((await call('look', { memoryMb: 48 })).stdout)).toBe(clean);
    expect(text((await call('look')).stdout)).toBe(clean);
  });
});
