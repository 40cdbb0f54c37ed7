import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import wabtInit from 'wabt';
import { capMemory, detectWasmKind } from '../../../../src/runners/wasm/binary.js';
import { isCapsuleError } from '../../../../src/errors.js';
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
