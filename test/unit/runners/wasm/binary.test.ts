import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import wabtInit from 'wabt';
import { capMemory, detectWasmKind, memoryFromHost } from '../../../../src/runners/wasm/binary.js';
import { HOST_MEMORY_IMPORT } from '../../../../src/runners/wasm/protocol.js';
import { isCapsuleError } from '../../../../src/base/errors.js';
import { webAssembly } from '../../../../src/runners/wasm/wasm-types.js';
import type { WasmMemory } from '../../../../src/runners/wasm/wasm-types.js';

const wabt = await wabtInit();
const wat = (text: string): Uint8Array => wabt.parseWat('t.wat', text).toBinary({}).buffer;
const fixture = (name: string): Uint8Array =>
  wat(readFileSync(new URL(`../../../../fixtures/wasm/${name}`, import.meta.url), 'utf8'));

/** Instantiates the module and tells whether its memory can reach `pages` pages (what V8 enforces). */
function canGrowTo(bytes: Uint8Array, pages: number): boolean {
  const WA = webAssembly();
  const inst = new WA.Instance(new WA.Module(bytes), {});
  const mem = inst.exports.memory as WasmMemory & { grow(delta: number): number };
  try {
    mem.grow(pages - mem.buffer.byteLength / 65536);
    return true;
  } catch {
    return false;
  }
}

function expectCapsuleError(fn: () => unknown, pattern: RegExp): void {
  try {
    fn();
  } catch (err) {
    expect(isCapsuleError(err)).toBe(true);
    expect((err as Error).message).toMatch(pattern);
    return;
  }
  throw new Error('expected a CapsuleError');
}

describe('detectWasmKind', () => {
  it('tells modules from components by the header', () => {
    expect(detectWasmKind(wat('(module)'), 'm.wasm')).toBe('module');
    expect(detectWasmKind(Uint8Array.from([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0]), 'c.wasm')).toBe('component');
  });

  it('refuses non-Wasm bytes with the file name', () => {
    expectCapsuleError(
      () => detectWasmKind(Buffer.from('#!/bin/sh\necho hi\n'), 'evil.wasm'),
      /evil\.wasm is not a WebAssembly binary/,
    );
    expectCapsuleError(
      () => detectWasmKind(Uint8Array.from([0, 0x61, 0x73, 0x6d, 2, 0, 0, 0]), 'v2.wasm'),
      /unsupported WebAssembly version/,
    );
  });
});

describe('capMemory', () => {
  it('adds a maximum to an unbounded memory, and V8 enforces it', () => {
    const module = wat('(module (memory (export "memory") 1))');
    expect(canGrowTo(module, 64)).toBe(true);
    const capped = capMemory(module, { file: 'm.wasm', capPages: 4, allowMemoryImport: false });
    expect(capped.maxPages).toEqual([4]);
    expect(canGrowTo(capped.bytes, 4)).toBe(true);
    expect(canGrowTo(capped.bytes, 5)).toBe(false);
  });

  it('keeps a smaller declared maximum', () => {
    const capped = capMemory(wat('(module (memory (export "memory") 1 2))'), {
      file: 'm.wasm',
      capPages: 16,
      allowMemoryImport: false,
    });
    expect(capped.maxPages).toEqual([2]);
    expect(canGrowTo(capped.bytes, 2)).toBe(true);
    expect(canGrowTo(capped.bytes, 3)).toBe(false);
  });

  it('leaves a module without memory unchanged', () => {
    const module = wat('(module (func (export "f")))');
    expect(
      Buffer.from(capMemory(module, { file: 'm.wasm', capPages: 1, allowMemoryImport: false }).bytes),
    ).toEqual(Buffer.from(module));
  });

  it('refuses a module that imports its memory', () => {
    expectCapsuleError(
      () =>
        capMemory(fixture('memory-import.wat'), { file: 'mi.wasm', capPages: 16, allowMemoryImport: false }),
      /mi\.wasm imports its memory \(env\.memory\)/,
    );
  });

  it('allows memory imports inside components (the main core module defines the capped memory)', () => {
    expect(
      capMemory(fixture('memory-import.wat'), { file: 'c', capPages: 16, allowMemoryImport: true }).maxPages,
    ).toEqual([]);
  });

  it('refuses a module whose initial memory exceeds the cap', () => {
    expectCapsuleError(
      () =>
        capMemory(fixture('big-memory.wat'), { file: 'big.wasm', capPages: 256, allowMemoryImport: false }),
      /needs at least 1024 pages \(64 MiB\).*limits\.memoryMb/,
    );
  });

  it('refuses truncated modules as malformed', () => {
    const module = fixture('probe.wat');
    expectCapsuleError(
      () =>
        capMemory(module.subarray(0, module.length - 7), {
          file: 'cut.wasm',
          capPages: 16,
          allowMemoryImport: false,
        }),
      /cut\.wasm is a malformed WebAssembly module/,
    );
  });

  it('never crashes on corrupt input: every truncation and byte flip either rewrites or is a CapsuleError', () => {
    const module = fixture('probe.wat');
    const variants: Uint8Array[] = [];
    for (let len = 8; len < module.length; len += 7) variants.push(module.subarray(0, len));
    let seed = 42;
    const next = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
    for (let i = 0; i < 300; i++) {
      const copy = Uint8Array.from(module);
      copy[8 + (next() % (copy.length - 8))] = next() % 256;
      variants.push(copy);
    }
    for (const bytes of variants) {
      try {
        capMemory(bytes, { file: 'fuzz.wasm', capPages: 16, allowMemoryImport: false });
      } catch (err) {
        expect(isCapsuleError(err), String(err)).toBe(true);
      }
    }
  });
});

describe('memoryFromHost', () => {
  const WA = webAssembly();
  const Memory = WA.Memory as unknown as new (limits: {
    initial: number;
    maximum?: number;
  }) => WasmMemory & { grow(delta: number): number };
  const capped = (text: string, capPages = 8): Uint8Array =>
    capMemory(wat(text), { file: 'm.wasm', capPages, allowMemoryImport: true }).bytes;
  const supply = (memory: WasmMemory, imports: Record<string, Record<string, unknown>> = {}) => ({
    ...imports,
    [HOST_MEMORY_IMPORT.module]: { [HOST_MEMORY_IMPORT.name]: memory },
  });

  it('turns the defined memory into an import with the capped limits; data segments land in the supplied memory', () => {
    const src = capped(`(module
      (import "env" "f" (func))
      (memory (export "memory") 2 100)
      (data (i32.const 70000) "Hi")
      (func (export "peek") (result i32) (i32.load8_u (i32.const 70001))))`);
    const hosted = memoryFromHost(src, 'm.wasm');
    expect(hosted?.memory).toEqual({ initial: 2, maximum: 8 });
    const module = new WA.Module(hosted?.bytes as Uint8Array);
    expect(WA.Module.imports(module)).toEqual([
      { module: 'env', name: 'f', kind: 'function' },
      { ...HOST_MEMORY_IMPORT, kind: 'memory' },
    ]);
    const memory = new Memory({ initial: 2, maximum: 8 });
    const inst = new WA.Instance(module, supply(memory, { env: { f: () => undefined } }));
    expect(inst.exports.memory).toBe(memory);
    expect((inst.exports.peek as () => number)()).toBe('i'.charCodeAt(0));
    expect(new Uint8Array(memory.buffer)[70000]).toBe('H'.charCodeAt(0));
  });

  it('adds an import section to a module that had none', () => {
    const hosted = memoryFromHost(
      capped('(module (memory 1) (func (export "size") (result i32) memory.size))'),
      'm',
    );
    const module = new WA.Module(hosted?.bytes as Uint8Array);
    const inst = new WA.Instance(module, supply(new Memory({ initial: 1, maximum: 8 })));
    expect((inst.exports.size as () => number)()).toBe(1);
  });

  it('the cap still holds: a memory with a higher maximum, or none, does not link', () => {
    const hosted = memoryFromHost(capped('(module (memory (export "memory") 1))', 4), 'm');
    const module = new WA.Module(hosted?.bytes as Uint8Array);
    for (const wider of [new Memory({ initial: 1, maximum: 5 }), new Memory({ initial: 1 })])
      expect(() => new WA.Instance(module, supply(wider))).toThrow(WA.LinkError);
    const memory = new Memory({ initial: 1, maximum: 4 });
    new WA.Instance(module, supply(memory));
    expect(() => memory.grow(4)).toThrow();
  });

  it('leaves alone modules it cannot rewrite exactly', () => {
    for (const text of [
      '(module)',
      '(module (import "env" "memory" (memory 1)))',
      '(module (memory 1) (memory 1))',
      `(module (import "${HOST_MEMORY_IMPORT.module}" "f" (func)) (memory 1))`,
    ])
      expect(memoryFromHost(capped(text), 'm'), text).toBeUndefined();
    expect(memoryFromHost(wat('(module (memory 1 2 shared))'), 'm')).toBeUndefined();
  });
});
