/**
 * One call's preview1 state: its fd table (stdio, preopens, what the guest opened), the guest memory it
 * reads and writes, and the lookups every function starts with. The functions themselves live by WASI
 * area (proc.ts, clock.ts, fd.ts, path.ts, poll.ts); host.ts puts them together.
 *
 * Self-contained (only `node:` imports and siblings that have only those): the worker loads it.
 */
import { closeSync } from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { ConfinedDir, type FileLog, type FileTimes, type WriteBudget } from '../confined-dir.js';
import {
  DIR_RIGHTS,
  E,
  FDFLAGS,
  FILE_RIGHTS,
  FILETYPE,
  FSTFLAGS,
  LOOKUP_SYMLINK_FOLLOW,
  STDIO_RIGHTS,
} from './abi.js';

/** Where a guest's stdout/stderr bytes go (may throw to stop the guest, e.g. at the output cap). */
export interface ByteSink {
  write(data: Uint8Array): void;
}

export interface Preview1Preopen {
  /** Path the guest sees, e.g. `/data`. */
  guest: string;
  /** The granted host directory itself (absolute, canonical). */
  host: string;
  readOnly: boolean;
}

export interface Preview1Options {
  /** argv including argv[0]. */
  args: readonly string[];
  env: Readonly<Record<string, string>>;
  stdin: Uint8Array;
  stdout: ByteSink;
  stderr: ByteSink;
  preopens: readonly Preview1Preopen[];
  /** The instance's memory, once it exists. */
  memory: () => { buffer: ArrayBuffer } | undefined;
  /** Names a guest never sees in a granted folder (capsule's own state). */
  hidden?: ((name: string) => boolean) | undefined;
  /** The call's cap on bytes written to its granted folders (limits.writeBytes). */
  writes: WriteBudget;
  /** A learning run's record of every filesystem call. */
  log?: FileLog | undefined;
  /**
   * The preview1 functions the module imports (see preview1Imports): only these are wrapped for the
   * call. Absent: all of them.
   */
  names?: readonly string[] | undefined;
}

/** Thrown by proc_exit; the runner catches it and reports `code`. */
export class Preview1Exit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

interface Base {
  rights: bigint;
  inheriting: bigint;
  fdflags: number;
}
export interface StdioEntry extends Base {
  kind: 'stdio';
  n: 0 | 1 | 2;
}
export interface DirEntry extends Base {
  kind: 'dir';
  dir: ConfinedDir;
  /** Set for a preopen: the name fd_prestat_dir_name gives. */
  preopen: string | undefined;
  /** The listing of the last fd_readdir from cookie 0 (later cookies continue it). */
  listing: Array<{ name: string; ino: bigint; type: number }> | undefined;
}
export interface FileEntry extends Base {
  kind: 'file';
  fd: number;
  pos: bigint;
  /** The host fd of a directory it was opened in, for EROFS on fd-level changes. */
  readOnly: boolean;
  readable: boolean;
  writable: boolean;
}
export type Entry = StdioEntry | DirEntry | FileEntry;

export class WasiError extends Error {
  constructor(readonly errno: number) {
    super(`errno ${errno}`);
  }
}
export const fail = (errno: number): never => {
  throw new WasiError(errno);
};

export const MAX_U64 = (1n << 64n) - 1n;
/** Open fds one call may hold (stdio and preopens included). */
export const MAX_OPEN_FDS = 1024;
export const U64 = (v: bigint): bigint => BigInt.asUintN(64, v);
const decoder = new TextDecoder('utf-8', { fatal: true });
export const encoder = new TextEncoder();

export function filetypeOf(
  st: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean } & BigIntStats,
): number {
  if (st.isFile()) return FILETYPE.REGULAR_FILE;
  if (st.isDirectory()) return FILETYPE.DIRECTORY;
  if (st.isSymbolicLink()) return FILETYPE.SYMBOLIC_LINK;
  if (st.isCharacterDevice()) return FILETYPE.CHARACTER_DEVICE;
  if (st.isBlockDevice()) return FILETYPE.BLOCK_DEVICE;
  if (st.isSocket()) return FILETYPE.SOCKET_STREAM;
  return FILETYPE.UNKNOWN;
}

/** The times preview1's flags ask for (validated: a time and its NOW flag together is EINVAL). */
export function times(atim: bigint, mtim: bigint, flags: number): FileTimes {
  if ((flags & FSTFLAGS.ATIM) !== 0 && (flags & FSTFLAGS.ATIM_NOW) !== 0) fail(E.INVAL);
  if ((flags & FSTFLAGS.MTIM) !== 0 && (flags & FSTFLAGS.MTIM_NOW) !== 0) fail(E.INVAL);
  if ((flags & ~0xf) !== 0) fail(E.INVAL);
  const pick = (t: bigint, set: number, now: number): bigint | 'now' | undefined =>
    (flags & now) !== 0 ? 'now' : (flags & set) !== 0 ? U64(t) : undefined;
  return {
    atime: pick(atim, FSTFLAGS.ATIM, FSTFLAGS.ATIM_NOW),
    mtime: pick(mtim, FSTFLAGS.MTIM, FSTFLAGS.MTIM_NOW),
  };
}

export const follow = (lookupflags: number): boolean => (lookupflags & LOOKUP_SYMLINK_FOLLOW) !== 0;

const stdio = (n: 0 | 1 | 2): StdioEntry => ({
  kind: 'stdio',
  n,
  rights: STDIO_RIGHTS,
  inheriting: 0n,
  fdflags: n === 0 ? 0 : FDFLAGS.APPEND,
});

/** One preview1 function of a call: the guest's arguments after the call's state. */
export type Preview1Function = (call: Preview1Call, ...args: never[]) => number | undefined;

/** The state of one call. Host fds are opened here (the preopens) and by path_open; close() closes them. */
export class Preview1Call {
  readonly table = new Map<number, Entry>();
  /** How much of stdin the guest has read. */
  stdinPos = 0;
  /** Made on the first poll_oneoff that sleeps: most calls never sleep. */
  sleeper: Int32Array | undefined;
  #closed = false;

  constructor(readonly options: Preview1Options) {
    this.table.set(0, stdio(0));
    this.table.set(1, stdio(1));
    this.table.set(2, stdio(2));
    const { hidden, writes, log } = options;
    try {
      options.preopens.forEach((p, i) => {
        this.table.set(3 + i, {
          kind: 'dir',
          dir: ConfinedDir.open(p.host, { readOnly: p.readOnly, hidden, writes, log }),
          preopen: p.guest,
          listing: undefined,
          rights: DIR_RIGHTS,
          inheriting: DIR_RIGHTS | FILE_RIGHTS,
          fdflags: 0,
        });
      });
    } catch (err) {
      this.close();
      throw err;
    }
  }

  get writes(): WriteBudget {
    return this.options.writes;
  }

  closeEntry(e: Entry): void {
    if (e.kind === 'dir') e.dir.close();
    else if (e.kind === 'file') closeSync(e.fd);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const e of this.table.values()) {
      try {
        this.closeEntry(e);
      } catch {
        // already closed
      }
    }
    this.table.clear();
  }

  mem(): DataView {
    const m = this.options.memory();
    if (m === undefined) return fail(E.FAULT);
    return new DataView(m.buffer);
  }

  bytes(ptr: number, len: number): Uint8Array {
    const m = this.options.memory();
    if (m === undefined) return fail(E.FAULT);
    return new Uint8Array(m.buffer, ptr >>> 0, len >>> 0);
  }

  str(ptr: number, len: number): string {
    try {
      return decoder.decode(this.bytes(ptr, len));
    } catch (err) {
      if (err instanceof RangeError) throw err;
      return fail(E.ILSEQ);
    }
  }

  entry(fd: number): Entry {
    return this.table.get(fd >>> 0) ?? fail(E.BADF);
  }

  need(e: Entry, right: bigint): void {
    if ((e.rights & right) === 0n) fail(E.NOTCAPABLE);
  }

  dirOf(fd: number, right: bigint): DirEntry {
    const e = this.entry(fd);
    if (e.kind !== 'dir') return fail(E.NOTDIR);
    this.need(e, right);
    return e;
  }

  fileOf(fd: number): FileEntry {
    const e = this.entry(fd);
    if (e.kind === 'dir') return fail(E.ISDIR);
    if (e.kind !== 'file') return fail(E.BADF);
    return e;
  }

  nextFd(): number {
    let fd = 3;
    while (this.table.has(fd)) fd++;
    return fd;
  }

  iovs(ptr: number, len: number): Uint8Array[] {
    const dv = this.mem();
    const out: Uint8Array[] = [];
    for (let i = 0; i < len >>> 0; i++) {
      const at = (ptr >>> 0) + i * 8;
      out.push(this.bytes(dv.getUint32(at, true), dv.getUint32(at + 4, true)));
    }
    return out;
  }

  writeFilestat(ptr: number, st: BigIntStats): void {
    const dv = this.mem();
    const p = ptr >>> 0;
    dv.setBigUint64(p, U64(st.dev), true);
    dv.setBigUint64(p + 8, U64(st.ino), true);
    dv.setUint8(p + 16, filetypeOf(st));
    dv.setBigUint64(p + 24, U64(st.nlink), true);
    dv.setBigUint64(p + 32, U64(st.size), true);
    dv.setBigUint64(p + 40, U64(st.atimeNs), true);
    dv.setBigUint64(p + 48, U64(st.mtimeNs), true);
    dv.setBigUint64(p + 56, U64(st.ctimeNs), true);
  }

  /** Write how many strings `list` holds at `countPtr`, and the bytes they take NUL-terminated at `sizePtr`. */
  putSizes(list: readonly string[], countPtr: number, sizePtr: number): number {
    const dv = this.mem();
    dv.setUint32(countPtr >>> 0, list.length, true);
    dv.setUint32(
      sizePtr >>> 0,
      list.reduce((n, a) => n + Buffer.byteLength(a) + 1, 0),
      true,
    );
    return E.SUCCESS;
  }

  /** Write `list` as NUL-terminated strings at `buf`, their addresses at `ptrs` (argv, environ). */
  putStrings(list: readonly string[], ptrs: number, buf: number): number {
    const dv = this.mem();
    let at = buf >>> 0;
    list.forEach((s, i) => {
      dv.setUint32((ptrs >>> 0) + i * 4, at, true);
      const b = encoder.encode(s);
      this.bytes(at, b.length + 1).set([...b, 0]);
      at += b.length + 1;
    });
    return E.SUCCESS;
  }
}
