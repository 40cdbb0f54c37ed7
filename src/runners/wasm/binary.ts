import { CapsuleError } from '../../base/errors.js';
import { wasmHeader } from '../../manifest/runnable.js';
import { HOST_MEMORY_IMPORT, type HostMemory } from './protocol.js';

/** 64 KiB: the Wasm page size. */
export const WASM_PAGE_BYTES = 65_536;

export type WasmKind = 'module' | 'component';

/**
 * Tells a core module (version 1) from a component (version 0x0d, layer 1) by the 8-byte header.
 * Anything else is not Wasm we can run: a CapsuleError naming the file.
 */
export function detectWasmKind(bytes: Uint8Array, file: string): WasmKind {
  const kind = wasmHeader(bytes);
  if (kind === 'not-wasm') {
    throw new CapsuleError('RUNNER_FAILED', `${file} is not a WebAssembly binary (bad magic number)`, {
      file,
      hint: 'Point the capability at a compiled .wasm file (a WASI preview1 module or a component).',
    });
  }
  if (kind === 'unsupported') {
    throw new CapsuleError('RUNNER_FAILED', `${file} has an unsupported WebAssembly version/layer`, {
      file,
      hint: 'Only core modules (version 1) and components (version 0x0d, layer 1) are supported.',
    });
  }
  return kind;
}

class Reader {
  pos: number;
  constructor(
    readonly bytes: Uint8Array,
    start: number,
    readonly end: number,
    readonly file: string,
  ) {
    this.pos = start;
  }

  fail(what: string): never {
    throw new CapsuleError('RUNNER_FAILED', `${this.file} is a malformed WebAssembly module: ${what}`, {
      file: this.file,
      hint: 'Rebuild the module; the binary is truncated or corrupt.',
    });
  }

  byte(): number {
    if (this.pos >= this.end) this.fail(`unexpected end at byte ${this.pos}`);
    return this.bytes[this.pos++] as number;
  }

  /** Unsigned LEB128 up to 64 bits, returned as a bigint so memory64 limits survive. */
  uleb(): bigint {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = this.byte();
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
      if (shift > 63n) this.fail('LEB128 number too long');
    }
  }

  u32(): number {
    const v = this.uleb();
    if (v > 0xffffffffn) this.fail('u32 out of range');
    return Number(v);
  }

  /** Signed LEB128 (heap types); only its length matters here. */
  sleb(): void {
    for (let i = 0; i < 10; i++) if ((this.byte() & 0x80) === 0) return;
    this.fail('LEB128 number too long');
  }

  skip(n: number): void {
    if (this.pos + n > this.end) this.fail(`unexpected end at byte ${this.pos}`);
    this.pos += n;
  }

  name(): string {
    const len = this.u32();
    const start = this.pos;
    this.skip(len);
    return Buffer.from(this.bytes.subarray(start, start + len)).toString('utf8');
  }
}

interface Limits {
  flags: number;
  min: bigint;
  max: bigint | undefined;
}

function readLimits(r: Reader): Limits {
  const flags = r.byte();
  if (flags > 0x07) r.fail(`unknown limits flags 0x${flags.toString(16)}`);
  const min = r.uleb();
  const max = (flags & 0x01) !== 0 ? r.uleb() : undefined;
  return { flags, min, max };
}

function skipValType(r: Reader): void {
  const t = r.byte();
  // GC-proposal reference types carry a heap type after the prefix byte.
  if (t === 0x63 || t === 0x64) r.sleb();
}

/** Skips what follows an import's kind byte: a function/tag type index, a table, a memory or a global. */
function skipImportType(r: Reader, kind: number): void {
  if (kind === 0x00 || kind === 0x04) {
    if (kind === 0x04) r.byte();
    r.u32();
  } else if (kind === 0x01) {
    skipValType(r);
    readLimits(r);
  } else if (kind === 0x02) {
    readLimits(r);
  } else if (kind === 0x03) {
    skipValType(r);
    r.byte();
  } else {
    r.fail(`unknown import kind 0x${kind.toString(16)}`);
  }
}

function encodeUleb(value: bigint): number[] {
  const out: number[] = [];
  let v = value;
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) b |= 0x80;
    out.push(b);
  } while (v !== 0n);
  return out;
}

interface Section {
  id: number;
  start: number;
  contentStart: number;
  end: number;
}

function sections(bytes: Uint8Array, file: string): Section[] {
  const r = new Reader(bytes, 8, bytes.length, file);
  const out: Section[] = [];
  while (r.pos < r.end) {
    const start = r.pos;
    const id = r.byte();
    const size = r.u32();
    const contentStart = r.pos;
    r.skip(size);
    out.push({ id, start, contentStart, end: r.pos });
  }
  return out;
}

export interface MemoryCapResult {
  /** The module bytes with every defined memory's maximum lowered to the cap. */
  bytes: Uint8Array;
  /** Pages each defined memory may reach after the rewrite (empty: the module has no memory). */
  maxPages: number[];
}

export interface MemoryCapOptions {
  file: string;
  capPages: number;
  /** Core modules inside a component may import the main module's memory; standalone modules may not. */
  allowMemoryImport: boolean;
}

/**
 * Rewrites the declared maximum of every memory the module defines to at most `capPages`, before
 * anything compiles it. V8 then refuses `memory.grow` past the cap, which is the only memory limit
 * that holds for Wasm (worker resourceLimits do not cover it). Refuses memory imports (a host-provided
 * memory would escape the cap), memory64, and memories whose minimum already exceeds the cap.
 */
export function capMemory(bytes: Uint8Array, options: MemoryCapOptions): MemoryCapResult {
  const { file, capPages } = options;
  if (detectWasmKind(bytes, file) !== 'module') {
    throw new CapsuleError('RUNNER_FAILED', `${file} is a component, not a core module`, { file });
  }
  const pieces: Uint8Array[] = [bytes.subarray(0, 8)];
  const maxPages: number[] = [];
  for (const { id, start: sectionStart, contentStart, end: contentEnd } of sections(bytes, file)) {
    if (id === 2) {
      const s = new Reader(bytes, contentStart, contentEnd, file);
      const count = s.u32();
      for (let i = 0; i < count; i++) {
        const moduleName = s.name();
        const fieldName = s.name();
        const kind = s.byte();
        if (kind === 0x02 && !options.allowMemoryImport) {
          throw new CapsuleError(
            'RUNNER_FAILED',
            `${file} imports its memory (${moduleName}.${fieldName}); capsule refuses modules that import memory because the memory cap could not apply`,
            {
              file,
              hint: 'Rebuild the module so it defines and exports its own memory (the default for wasm32-wasi).',
            },
          );
        }
        skipImportType(s, kind);
      }
      pieces.push(bytes.subarray(sectionStart, contentEnd));
    } else if (id === 5) {
      const s = new Reader(bytes, contentStart, contentEnd, file);
      const count = s.u32();
      const content: number[] = [...encodeUleb(BigInt(count))];
      for (let i = 0; i < count; i++) {
        const lim = readLimits(s);
        if ((lim.flags & 0x04) !== 0) {
          throw new CapsuleError(
            'RUNNER_FAILED',
            `${file} uses a 64-bit memory, which capsule does not run`,
            {
              file,
              hint: 'Build for wasm32 (memory32).',
            },
          );
        }
        const cap = BigInt(capPages);
        if (lim.min > cap) {
          throw new CapsuleError(
            'RUNNER_FAILED',
            `${file} needs at least ${lim.min} pages (${Number(lim.min) / 16} MiB) of memory, more than the cap of ${capPages} pages (limits.memoryMb)`,
            {
              file,
              field: 'limits.memoryMb',
              hint: 'Raise limits.memoryMb or shrink the module’s initial memory.',
            },
          );
        }
        const max = lim.max === undefined || lim.max > cap ? cap : lim.max;
        maxPages.push(Number(max));
        content.push(lim.flags | 0x01, ...encodeUleb(lim.min), ...encodeUleb(max));
      }
      if (s.pos !== s.end) s.fail('trailing bytes in the memory section');
      pieces.push(Uint8Array.from([5, ...encodeUleb(BigInt(content.length)), ...content]));
    } else {
      pieces.push(bytes.subarray(sectionStart, contentEnd));
    }
  }
  return { bytes: Buffer.concat(pieces), maxPages };
}

/**
 * Turns the one memory a (capped) module defines into an import of `HOST_MEMORY_IMPORT` with the
 * same limits, so the worker can hand each new instance a memory it already has, zeroed, instead
 * of a new one: a fresh memory's pages are mapped and faulted in on every call, which was a large
 * part of a component call. Instantiation then writes the data segments into it as into a new
 * one. Leaves the module as it is (undefined) when it defines no memory or several, imports one,
 * has a shared or unbounded one, or already imports from capsule's namespace.
 */
export function memoryFromHost(
  bytes: Uint8Array,
  file: string,
): { bytes: Uint8Array; memory: HostMemory } | undefined {
  const all = sections(bytes, file);
  const memorySection = all.filter((s) => s.id === 5);
  if (memorySection.length !== 1) return undefined;
  const [memories] = memorySection as [Section];
  const mem = new Reader(bytes, memories.contentStart, memories.end, file);
  if (mem.u32() !== 1) return undefined;
  const limitsStart = mem.pos;
  const limits = readLimits(mem);
  if (limits.flags !== 0x01 || limits.max === undefined) return undefined;
  const limitBytes = bytes.subarray(limitsStart, mem.pos);

  const importSection = all.find((s) => s.id === 2);
  let count = 0;
  let entries: Uint8Array = new Uint8Array(0);
  if (importSection !== undefined) {
    const s = new Reader(bytes, importSection.contentStart, importSection.end, file);
    count = s.u32();
    const first = s.pos;
    for (let i = 0; i < count; i++) {
      const moduleName = s.name();
      s.name();
      const kind = s.byte();
      if (moduleName === HOST_MEMORY_IMPORT.module || kind === 0x02) return undefined;
      skipImportType(s, kind);
    }
    entries = bytes.subarray(first, importSection.end);
  }
  const utf8 = (text: string): number[] => {
    const b = Buffer.from(text, 'utf8');
    return [...encodeUleb(BigInt(b.length)), ...b];
  };
  const content = Buffer.concat([
    Uint8Array.from(encodeUleb(BigInt(count + 1))),
    entries,
    Uint8Array.from([...utf8(HOST_MEMORY_IMPORT.module), ...utf8(HOST_MEMORY_IMPORT.name), 0x02]),
    limitBytes,
  ]);
  const newImports = Buffer.concat([Uint8Array.from([2, ...encodeUleb(BigInt(content.length))]), content]);
  const pieces: Uint8Array[] = [bytes.subarray(0, 8)];
  let placed = false;
  for (const s of all) {
    // Every known section but the types (1) comes after the imports; custom ones (0) may be anywhere.
    if (!placed && s.id >= 2) {
      pieces.push(newImports);
      placed = true;
    }
    if (s.id === 2 || s.id === 5) continue;
    pieces.push(bytes.subarray(s.start, s.end));
  }
  if (!placed) pieces.push(newImports);
  return {
    bytes: Buffer.concat(pieces),
    memory: { initial: Number(limits.min), maximum: Number(limits.max) },
  };
}
