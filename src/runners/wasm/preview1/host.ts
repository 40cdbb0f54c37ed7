/**
 * capsule's own WASI preview1 host: the `wasi_snapshot_preview1` import object of one call.
 * Every path_* call resolves through ConfinedDir beneath the directory fd it names (see
 * confined-dir.ts), straight on the granted host folders; fd_* calls work on host fds those opened.
 * Args, environment, clocks, random, poll_oneoff and in-memory stdio with caps complete it.
 * Rights are kept per fd (a preopen's are those of a directory; an opened fd gets what it asked
 * for within its directory's inheriting rights); read-only preopens refuse changes with EROFS.
 *
 * Self-contained (only `node:` imports and siblings that have only those): the worker loads it.
 */
import {
  closeSync,
  constants,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  lstatSync,
  openSync,
  readSync,
} from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { randomFillSync } from 'node:crypto';
import { assertSingleLink, ConfinedDir, setTimes, type FileLog, type WriteBudget } from '../confined-dir.js';
import type { FileTimes } from '../confined-dir.js';
import {
  CLOCK,
  DIR_RIGHTS,
  E,
  ERRNO_OF,
  EVENTTYPE,
  FDFLAGS,
  FILE_RIGHTS,
  FILETYPE,
  FSTFLAGS,
  LOOKUP_SYMLINK_FOLLOW,
  OFLAGS,
  R,
  STDIO_RIGHTS,
  WHENCE,
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

export interface Preview1Host {
  imports: Record<string, (...args: never[]) => number | undefined>;
  /** Closes every host fd the call opened (its preopens included). Safe to call twice. */
  close(): void;
}

interface Base {
  rights: bigint;
  inheriting: bigint;
  fdflags: number;
}
interface StdioEntry extends Base {
  kind: 'stdio';
  n: 0 | 1 | 2;
}
interface DirEntry extends Base {
  kind: 'dir';
  dir: ConfinedDir;
  /** Set for a preopen: the name fd_prestat_dir_name gives. */
  preopen: string | undefined;
  /** The listing of the last fd_readdir from cookie 0 (later cookies continue it). */
  listing: Array<{ name: string; ino: bigint; type: number }> | undefined;
}
interface FileEntry extends Base {
  kind: 'file';
  fd: number;
  pos: bigint;
  /** The host fd of a directory it was opened in, for EROFS on fd-level changes. */
  readOnly: boolean;
  readable: boolean;
  writable: boolean;
}
type Entry = StdioEntry | DirEntry | FileEntry;

class WasiError extends Error {
  constructor(readonly errno: number) {
    super(`errno ${errno}`);
  }
}
const fail = (errno: number): never => {
  throw new WasiError(errno);
};

const {
  O_RDONLY,
  O_WRONLY,
  O_RDWR,
  O_CREAT,
  O_EXCL,
  O_TRUNC,
  O_APPEND,
  O_DIRECTORY,
  O_NONBLOCK,
  O_SYNC,
  O_DSYNC,
} = constants;
const MAX_U64 = (1n << 64n) - 1n;
/** Open fds one call may hold (stdio and preopens included). */
export const MAX_OPEN_FDS = 1024;
const RO_DROPPED = R.FD_ALLOCATE | R.FD_FILESTAT_SET_SIZE | R.FD_FILESTAT_SET_TIMES;
const U64 = (v: bigint): bigint => BigInt.asUintN(64, v);
const decoder = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();

function filetypeOf(
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

/** Builds the import object of one call. Host fds are opened here and closed by `close()`. */
/** The wasi_snapshot_preview1 functions a module imports (what `names` of createPreview1 takes). */
export function preview1Imports(
  imports: ReadonlyArray<{ module: string; name: string; kind: string }>,
): string[] {
  return imports
    .filter((i) => i.module === 'wasi_snapshot_preview1' && i.kind === 'function')
    .map((i) => i.name);
}

export function createPreview1(options: Preview1Options): Preview1Host {
  const table = new Map<number, Entry>();
  const stdio = (n: 0 | 1 | 2): StdioEntry => ({
    kind: 'stdio',
    n,
    rights: STDIO_RIGHTS,
    inheriting: 0n,
    fdflags: n === 0 ? 0 : FDFLAGS.APPEND,
  });
  table.set(0, stdio(0));
  table.set(1, stdio(1));
  table.set(2, stdio(2));
  const hidden = options.hidden;
  const writes = options.writes;
  let closed = false;
  const closeEntry = (e: Entry): void => {
    if (e.kind === 'dir') e.dir.close();
    else if (e.kind === 'file') closeSync(e.fd);
  };
  const close = (): void => {
    if (closed) return;
    closed = true;
    for (const e of table.values()) {
      try {
        closeEntry(e);
      } catch {
        // already closed
      }
    }
    table.clear();
  };
  try {
    options.preopens.forEach((p, i) => {
      table.set(3 + i, {
        kind: 'dir',
        dir: ConfinedDir.open(p.host, { readOnly: p.readOnly, hidden, writes, log: options.log }),
        preopen: p.guest,
        listing: undefined,
        rights: DIR_RIGHTS,
        inheriting: DIR_RIGHTS | FILE_RIGHTS,
        fdflags: 0,
      });
    });
  } catch (err) {
    close();
    throw err;
  }

  let stdinPos = 0;
  const mem = (): DataView => {
    const m = options.memory();
    if (m === undefined) return fail(E.FAULT);
    return new DataView(m.buffer);
  };
  const bytes = (ptr: number, len: number): Uint8Array => {
    const m = options.memory();
    if (m === undefined) return fail(E.FAULT);
    return new Uint8Array(m.buffer, ptr >>> 0, len >>> 0);
  };
  const str = (ptr: number, len: number): string => {
    try {
      return decoder.decode(bytes(ptr, len));
    } catch (err) {
      if (err instanceof RangeError) throw err;
      return fail(E.ILSEQ);
    }
  };
  const entry = (fd: number): Entry => table.get(fd >>> 0) ?? fail(E.BADF);
  const need = (e: Entry, right: bigint): void => {
    if ((e.rights & right) === 0n) fail(E.NOTCAPABLE);
  };
  const dirOf = (fd: number, right: bigint): DirEntry => {
    const e = entry(fd);
    if (e.kind !== 'dir') return fail(E.NOTDIR);
    need(e, right);
    return e;
  };
  const fileOf = (fd: number): FileEntry => {
    const e = entry(fd);
    if (e.kind === 'dir') return fail(E.ISDIR);
    if (e.kind !== 'file') return fail(E.BADF);
    return e;
  };
  const nextFd = (): number => {
    let fd = 3;
    while (table.has(fd)) fd++;
    return fd;
  };
  const iovs = (ptr: number, len: number): Uint8Array[] => {
    const dv = mem();
    const out: Uint8Array[] = [];
    for (let i = 0; i < len >>> 0; i++) {
      const at = (ptr >>> 0) + i * 8;
      out.push(bytes(dv.getUint32(at, true), dv.getUint32(at + 4, true)));
    }
    return out;
  };
  const writeFilestat = (ptr: number, st: BigIntStats): void => {
    const dv = mem();
    const p = ptr >>> 0;
    dv.setBigUint64(p, U64(st.dev), true);
    dv.setBigUint64(p + 8, U64(st.ino), true);
    dv.setUint8(p + 16, filetypeOf(st));
    dv.setBigUint64(p + 24, U64(st.nlink), true);
    dv.setBigUint64(p + 32, U64(st.size), true);
    dv.setBigUint64(p + 40, U64(st.atimeNs), true);
    dv.setBigUint64(p + 48, U64(st.mtimeNs), true);
    dv.setBigUint64(p + 56, U64(st.ctimeNs), true);
  };
  /** The times preview1's flags ask for (validated: a time and its NOW flag together is EINVAL). */
  const times = (atim: bigint, mtim: bigint, flags: number): FileTimes => {
    if ((flags & FSTFLAGS.ATIM) !== 0 && (flags & FSTFLAGS.ATIM_NOW) !== 0) fail(E.INVAL);
    if ((flags & FSTFLAGS.MTIM) !== 0 && (flags & FSTFLAGS.MTIM_NOW) !== 0) fail(E.INVAL);
    if ((flags & ~0xf) !== 0) fail(E.INVAL);
    const pick = (t: bigint, set: number, now: number): bigint | 'now' | undefined =>
      (flags & now) !== 0 ? 'now' : (flags & set) !== 0 ? U64(t) : undefined;
    return {
      atime: pick(atim, FSTFLAGS.ATIM, FSTFLAGS.ATIM_NOW),
      mtime: pick(mtim, FSTFLAGS.MTIM, FSTFLAGS.MTIM_NOW),
    };
  };
  const follow = (lookupflags: number): boolean => (lookupflags & LOOKUP_SYMLINK_FOLLOW) !== 0;

  // Made on the first poll_oneoff that sleeps: most calls never sleep.
  let sleeper: Int32Array | undefined;

  const fns: Record<string, (...args: never[]) => number | undefined> = {
    args_sizes_get: (argc: number, size: number) => {
      const dv = mem();
      dv.setUint32(argc >>> 0, options.args.length, true);
      dv.setUint32(
        size >>> 0,
        options.args.reduce((n, a) => n + Buffer.byteLength(a) + 1, 0),
        true,
      );
      return E.SUCCESS;
    },
    args_get: (argv: number, buf: number) => putStrings(options.args, argv, buf),
    environ_sizes_get: (count: number, size: number) => {
      const vars = Object.entries(options.env).map(([k, v]) => `${k}=${v}`);
      const dv = mem();
      dv.setUint32(count >>> 0, vars.length, true);
      dv.setUint32(
        size >>> 0,
        vars.reduce((n, a) => n + Buffer.byteLength(a) + 1, 0),
        true,
      );
      return E.SUCCESS;
    },
    environ_get: (environ: number, buf: number) =>
      putStrings(
        Object.entries(options.env).map(([k, v]) => `${k}=${v}`),
        environ,
        buf,
      ),
    clock_res_get: (id: number, out: number) => {
      if (id < 0 || id > 3) return E.INVAL;
      mem().setBigUint64(out >>> 0, id === CLOCK.REALTIME ? 1_000_000n : 1_000n, true);
      return E.SUCCESS;
    },
    clock_time_get: (id: number, _precision: bigint, out: number) => {
      let t: bigint;
      if (id === CLOCK.REALTIME) t = BigInt(Date.now()) * 1_000_000n;
      else if (id === CLOCK.MONOTONIC) t = process.hrtime.bigint();
      else if (id === CLOCK.PROCESS_CPUTIME || id === CLOCK.THREAD_CPUTIME) {
        const u = process.cpuUsage();
        t = BigInt(u.user + u.system) * 1_000n;
      } else return E.INVAL;
      mem().setBigUint64(out >>> 0, t, true);
      return E.SUCCESS;
    },
    random_get: (ptr: number, len: number) => {
      randomFillSync(bytes(ptr, len));
      return E.SUCCESS;
    },
    sched_yield: () => E.SUCCESS,
    proc_exit: (code: number): never => {
      throw new Preview1Exit(code >>> 0);
    },
    proc_raise: () => E.NOSYS,
    sock_accept: (fd: number) => (entry(fd), E.NOTSOCK),
    sock_recv: (fd: number) => (entry(fd), E.NOTSOCK),
    sock_send: (fd: number) => (entry(fd), E.NOTSOCK),
    sock_shutdown: (fd: number) => (entry(fd), E.NOTSOCK),

    fd_write: (fd: number, iovsPtr: number, iovsLen: number, nwritten: number) => {
      const e = entry(fd);
      need(e, R.FD_WRITE);
      let total = 0;
      if (e.kind === 'stdio') {
        if (e.n === 0) return E.BADF;
        const sink = e.n === 1 ? options.stdout : options.stderr;
        for (const b of iovs(iovsPtr, iovsLen)) {
          sink.write(b);
          total += b.length;
        }
      } else if (e.kind === 'file') {
        if (!e.writable) return E.BADF;
        const append = (e.fdflags & FDFLAGS.APPEND) !== 0;
        for (const b of iovs(iovsPtr, iovsLen)) {
          // An O_APPEND host fd writes at the end whatever the position (Linux pwrite too).
          const n = writes.write(e.fd, b, 0, b.length, append ? null : Number(e.pos));
          total += n;
          if (!append) e.pos += BigInt(n);
          if (n < b.length) break;
        }
        if (append) e.pos = fstatSync(e.fd, { bigint: true }).size;
      } else return E.ISDIR;
      mem().setUint32(nwritten >>> 0, total, true);
      return E.SUCCESS;
    },
    fd_read: (fd: number, iovsPtr: number, iovsLen: number, nread: number) => {
      const e = entry(fd);
      need(e, R.FD_READ);
      let total = 0;
      if (e.kind === 'stdio') {
        if (e.n !== 0) return E.BADF;
        for (const b of iovs(iovsPtr, iovsLen)) {
          const chunk = options.stdin.subarray(stdinPos, stdinPos + b.length);
          b.set(chunk);
          stdinPos += chunk.length;
          total += chunk.length;
          if (chunk.length < b.length) break;
        }
      } else if (e.kind === 'file') {
        if (!e.readable) return E.BADF;
        for (const b of iovs(iovsPtr, iovsLen)) {
          const n = readSync(e.fd, b, 0, b.length, e.pos);
          total += n;
          e.pos += BigInt(n);
          if (n < b.length) break;
        }
      } else return E.ISDIR;
      mem().setUint32(nread >>> 0, total, true);
      return E.SUCCESS;
    },
    fd_pread: (fd: number, iovsPtr: number, iovsLen: number, offset: bigint, nread: number) => {
      const e = fileOf(fd);
      need(e, R.FD_READ | R.FD_SEEK);
      if (!e.readable) return E.BADF;
      let pos = U64(offset);
      let total = 0;
      for (const b of iovs(iovsPtr, iovsLen)) {
        const n = readSync(e.fd, b, 0, b.length, pos);
        total += n;
        pos += BigInt(n);
        if (n < b.length) break;
      }
      mem().setUint32(nread >>> 0, total, true);
      return E.SUCCESS;
    },
    fd_pwrite: (fd: number, iovsPtr: number, iovsLen: number, offset: bigint, nwritten: number) => {
      const e = fileOf(fd);
      if (e.readOnly) return E.ROFS;
      need(e, R.FD_WRITE | R.FD_SEEK);
      if (!e.writable) return E.BADF;
      let pos = U64(offset);
      let total = 0;
      for (const b of iovs(iovsPtr, iovsLen)) {
        const n = writes.write(e.fd, b, 0, b.length, Number(pos));
        total += n;
        pos += BigInt(n);
        if (n < b.length) break;
      }
      mem().setUint32(nwritten >>> 0, total, true);
      return E.SUCCESS;
    },
    fd_seek: (fd: number, offset: bigint, whence: number, out: number) => {
      const e = entry(fd);
      if (e.kind === 'stdio') return E.SPIPE;
      if (e.kind === 'dir') return E.BADF;
      need(e, offset === 0n && whence === WHENCE.CUR ? R.FD_TELL | R.FD_SEEK : R.FD_SEEK);
      let base: bigint;
      if (whence === WHENCE.SET) base = 0n;
      else if (whence === WHENCE.CUR) base = e.pos;
      else if (whence === WHENCE.END) base = fstatSync(e.fd, { bigint: true }).size;
      else return E.INVAL;
      const next = base + BigInt.asIntN(64, offset);
      if (next < 0n || next > MAX_U64) return E.INVAL;
      e.pos = next;
      mem().setBigUint64(out >>> 0, next, true);
      return E.SUCCESS;
    },
    fd_tell: (fd: number, out: number) => {
      const e = entry(fd);
      if (e.kind === 'stdio') return E.SPIPE;
      if (e.kind === 'dir') return E.BADF;
      need(e, R.FD_TELL);
      mem().setBigUint64(out >>> 0, e.pos, true);
      return E.SUCCESS;
    },
    fd_close: (fd: number) => {
      const e = entry(fd);
      closeEntry(e);
      table.delete(fd >>> 0);
      return E.SUCCESS;
    },
    fd_renumber: (from: number, to: number) => {
      const a = entry(from);
      const b = entry(to);
      if (from >>> 0 === to >>> 0) return E.SUCCESS;
      closeEntry(b);
      table.set(to >>> 0, a);
      table.delete(from >>> 0);
      return E.SUCCESS;
    },
    fd_fdstat_get: (fd: number, out: number) => {
      const e = entry(fd);
      const dv = mem();
      const p = out >>> 0;
      let type: number = FILETYPE.CHARACTER_DEVICE;
      if (e.kind === 'dir') type = FILETYPE.DIRECTORY;
      else if (e.kind === 'file') type = filetypeOf(fstatSync(e.fd, { bigint: true }));
      dv.setUint8(p, type);
      dv.setUint16(p + 2, e.fdflags, true);
      dv.setBigUint64(p + 8, e.rights, true);
      dv.setBigUint64(p + 16, e.inheriting, true);
      return E.SUCCESS;
    },
    fd_fdstat_set_flags: (fd: number, flags: number) => {
      const e = entry(fd);
      if (e.kind === 'file' && e.readOnly && (flags & FDFLAGS.APPEND) !== 0) return E.ROFS;
      need(e, R.FD_FDSTAT_SET_FLAGS);
      if ((flags & ~0x1f) !== 0) return E.INVAL;
      if (e.kind !== 'file') {
        e.fdflags = flags & FDFLAGS.NONBLOCK ? e.fdflags | FDFLAGS.NONBLOCK : e.fdflags & ~FDFLAGS.NONBLOCK;
        return E.SUCCESS;
      }
      const append = (flags & FDFLAGS.APPEND) !== 0;
      if (append && e.readOnly) return E.ROFS;
      if (append !== ((e.fdflags & FDFLAGS.APPEND) !== 0)) {
        // Node has no fcntl(F_SETFL): reopen the same open file through its /proc link with the new mode.
        const mode = e.readable && e.writable ? O_RDWR : e.writable ? O_WRONLY : O_RDONLY;
        const fresh = openSync(`/proc/self/fd/${e.fd}`, mode | (append ? O_APPEND : 0));
        closeSync(e.fd);
        e.fd = fresh;
      }
      e.fdflags = flags;
      return E.SUCCESS;
    },
    fd_fdstat_set_rights: (fd: number, base: bigint, inheriting: bigint) => {
      const e = entry(fd);
      const b = U64(base);
      const i = U64(inheriting);
      if ((b & ~e.rights) !== 0n || (i & ~e.inheriting) !== 0n) return E.NOTCAPABLE;
      e.rights = b;
      e.inheriting = i;
      return E.SUCCESS;
    },
    fd_filestat_get: (fd: number, out: number) => {
      const e = entry(fd);
      need(e, R.FD_FILESTAT_GET);
      if (e.kind === 'stdio') {
        bytes(out, 64).fill(0);
        mem().setUint8((out >>> 0) + 16, FILETYPE.CHARACTER_DEVICE);
        return E.SUCCESS;
      }
      writeFilestat(out, fstatSync(e.kind === 'dir' ? e.dir.fd : e.fd, { bigint: true }));
      return E.SUCCESS;
    },
    fd_filestat_set_size: (fd: number, size: bigint) => {
      const e = fileOf(fd);
      if (e.readOnly) return E.ROFS;
      need(e, R.FD_FILESTAT_SET_SIZE);
      if (!e.writable) return E.BADF;
      const n = U64(size);
      if (n > BigInt(Number.MAX_SAFE_INTEGER)) return E.FBIG;
      writes.setSize(e.fd, Number(n));
      return E.SUCCESS;
    },
    fd_filestat_set_times: (fd: number, atim: bigint, mtim: bigint, flags: number) => {
      const e = entry(fd);
      if (e.kind === 'stdio') return E.BADF;
      if (e.kind === 'dir' ? e.dir.readOnly : e.readOnly) return E.ROFS;
      need(e, R.FD_FILESTAT_SET_TIMES);
      const hostFd = e.kind === 'dir' ? e.dir.fd : e.fd;
      assertSingleLink(hostFd);
      setTimes(`/proc/${process.pid}/fd/${hostFd}`, times(atim, mtim, flags), false);
      return E.SUCCESS;
    },
    fd_allocate: (fd: number, offset: bigint, len: bigint) => {
      const e = fileOf(fd);
      if (e.readOnly) return E.ROFS;
      need(e, R.FD_ALLOCATE);
      if (!e.writable) return E.BADF;
      const end = U64(offset) + U64(len);
      if (end > BigInt(Number.MAX_SAFE_INTEGER)) return E.FBIG;
      // posix_fallocate semantics without it: a file shorter than offset+len grows to it.
      if (fstatSync(e.fd, { bigint: true }).size < end) writes.setSize(e.fd, Number(end));
      return E.SUCCESS;
    },
    fd_advise: (fd: number, offset: bigint, len: bigint, advice: number) => {
      const e = fileOf(fd);
      need(e, R.FD_ADVISE);
      if (advice < 0 || advice > 5) return E.INVAL;
      void offset;
      void len;
      return E.SUCCESS;
    },
    fd_datasync: (fd: number) => {
      const e = fileOf(fd);
      need(e, R.FD_DATASYNC);
      fdatasyncSync(e.fd);
      return E.SUCCESS;
    },
    fd_sync: (fd: number) => {
      const e = entry(fd);
      need(e, R.FD_SYNC);
      if (e.kind === 'file') fsyncSync(e.fd);
      return E.SUCCESS;
    },
    fd_prestat_get: (fd: number, out: number) => {
      const e = entry(fd);
      if (e.kind !== 'dir' || e.preopen === undefined) return E.BADF;
      const dv = mem();
      dv.setUint8(out >>> 0, 0);
      dv.setUint32((out >>> 0) + 4, Buffer.byteLength(e.preopen), true);
      return E.SUCCESS;
    },
    fd_prestat_dir_name: (fd: number, ptr: number, len: number) => {
      const e = entry(fd);
      if (e.kind !== 'dir' || e.preopen === undefined) return E.BADF;
      const name = encoder.encode(e.preopen);
      if (len >>> 0 < name.length) return E.NAMETOOLONG;
      bytes(ptr, name.length).set(name);
      return E.SUCCESS;
    },
    fd_readdir: (fd: number, buf: number, bufLen: number, cookie: bigint, bufused: number) => {
      const e = dirOf(fd, R.FD_READDIR);
      const start = U64(cookie);
      if (start === 0n || e.listing === undefined) {
        const self = fstatSync(e.dir.fd, { bigint: true });
        const listing: Array<{ name: string; ino: bigint; type: number }> = [
          { name: '.', ino: self.ino, type: FILETYPE.DIRECTORY },
          { name: '..', ino: self.ino, type: FILETYPE.DIRECTORY },
        ];
        for (const d of e.dir.readdir()) {
          let ino = 0n;
          let type: number = FILETYPE.UNKNOWN;
          try {
            const st = lstatSync(`/proc/self/fd/${e.dir.fd}/${d.name}`, { bigint: true });
            ino = st.ino;
            type = filetypeOf(st);
          } catch {
            continue; // gone since the listing
          }
          listing.push({ name: d.name, ino, type });
        }
        e.listing = listing;
      }
      const out = bytes(buf, bufLen);
      const dv = mem();
      let used = 0;
      for (let i = Number(start); i < e.listing.length && used < out.length; i++) {
        const d = e.listing[i] as { name: string; ino: bigint; type: number };
        const name = encoder.encode(d.name);
        const rec = new Uint8Array(24 + name.length);
        const rv = new DataView(rec.buffer);
        rv.setBigUint64(0, BigInt(i + 1), true);
        rv.setBigUint64(8, U64(d.ino), true);
        rv.setUint32(16, name.length, true);
        rv.setUint8(20, d.type);
        rec.set(name, 24);
        const n = Math.min(rec.length, out.length - used);
        out.set(rec.subarray(0, n), used);
        used += n;
      }
      dv.setUint32(bufused >>> 0, used, true);
      return E.SUCCESS;
    },

    path_open: (
      dirfd: number,
      lookupflags: number,
      pathPtr: number,
      pathLen: number,
      oflags: number,
      rightsBase: bigint,
      rightsInheriting: bigint,
      fdflags: number,
      fdOut: number,
    ) => {
      const d = dirOf(dirfd, R.PATH_OPEN);
      // Host fds are the capsule process's own: one call cannot exhaust them for everyone else.
      if (table.size >= MAX_OPEN_FDS) return E.MFILE;
      const guestPath = str(pathPtr, pathLen);
      if ((oflags & OFLAGS.CREAT) !== 0) need(d, R.PATH_CREATE_FILE);
      if ((oflags & OFLAGS.TRUNC) !== 0) need(d, R.PATH_FILESTAT_SET_SIZE);
      // On a read-only grant the rights that modify a file are dropped, not refused: like a read-only
      // mount, opening to read works whatever rights come along; using them is ROFS (checked first below).
      const wanted = U64(rightsBase) & d.inheriting & (d.dir.readOnly ? ~RO_DROPPED : MAX_U64);
      const wantedInheriting = U64(rightsInheriting) & d.inheriting;
      const asDir = (oflags & OFLAGS.DIRECTORY) !== 0;
      if (asDir && (U64(rightsBase) & R.FD_WRITE) !== 0n) return E.ISDIR;
      const write =
        (wanted & (R.FD_WRITE | R.FD_ALLOCATE | R.FD_FILESTAT_SET_SIZE)) !== 0n ||
        (fdflags & FDFLAGS.APPEND) !== 0 ||
        (oflags & OFLAGS.TRUNC) !== 0;
      const read = (wanted & (R.FD_READ | R.FD_READDIR)) !== 0n || !write;
      let flags = asDir ? O_RDONLY | O_DIRECTORY : write && read ? O_RDWR : write ? O_WRONLY : O_RDONLY;
      if ((oflags & OFLAGS.CREAT) !== 0) flags |= O_CREAT;
      if ((oflags & OFLAGS.EXCL) !== 0) flags |= O_EXCL;
      if ((oflags & OFLAGS.TRUNC) !== 0) flags |= O_TRUNC;
      if ((fdflags & FDFLAGS.APPEND) !== 0) flags |= O_APPEND;
      if ((fdflags & FDFLAGS.NONBLOCK) !== 0) flags |= O_NONBLOCK;
      if ((fdflags & (FDFLAGS.SYNC | FDFLAGS.RSYNC)) !== 0) flags |= O_SYNC;
      if ((fdflags & FDFLAGS.DSYNC) !== 0) flags |= O_DSYNC;
      if (
        d.dir.readOnly &&
        (((write || (oflags & OFLAGS.CREAT) !== 0) && !asDir) ||
          (oflags & (OFLAGS.CREAT | OFLAGS.TRUNC)) !== 0)
      ) {
        d.dir.refused((oflags & OFLAGS.CREAT) !== 0 ? 'create' : 'write', guestPath);
        return E.ROFS;
      }
      let hostFd: number;
      try {
        hostFd = d.dir.openFile(guestPath, { follow: follow(lookupflags), flags, mode: 0o666 });
      } catch (err) {
        // A directory opened for writing: retry read-only, as POSIX open of a dir with O_RDWR is EISDIR.
        if (
          (err as { code?: string }).code === 'EISDIR' &&
          !asDir &&
          (oflags & OFLAGS.CREAT) === 0 &&
          write
        ) {
          if ((oflags & OFLAGS.TRUNC) !== 0) throw err;
          hostFd = d.dir.openFile(guestPath, { follow: follow(lookupflags), flags: O_RDONLY | O_DIRECTORY });
        } else throw err;
      }
      const st = fstatSync(hostFd);
      const fd = nextFd();
      if (st.isDirectory()) {
        table.set(fd, {
          kind: 'dir',
          dir: d.dir.adoptDir(hostFd),
          preopen: undefined,
          listing: undefined,
          rights: wanted & DIR_RIGHTS,
          inheriting: wantedInheriting,
          fdflags: fdflags & ~FDFLAGS.APPEND,
        });
      } else {
        table.set(fd, {
          kind: 'file',
          fd: hostFd,
          pos: 0n,
          readOnly: d.dir.readOnly,
          readable: read,
          writable: write && !d.dir.readOnly,
          // Rights 0 (what many callers pass) opens for reading: the right is implied, as the mode is.
          rights: (wanted & FILE_RIGHTS) | (read ? R.FD_READ : 0n),
          inheriting: wantedInheriting,
          fdflags,
        });
      }
      mem().setUint32(fdOut >>> 0, fd, true);
      return E.SUCCESS;
    },
    path_create_directory: (dirfd: number, pathPtr: number, pathLen: number) => {
      const d = dirOf(dirfd, R.PATH_CREATE_DIRECTORY);
      d.dir.mkdir(str(pathPtr, pathLen));
      return E.SUCCESS;
    },
    path_remove_directory: (dirfd: number, pathPtr: number, pathLen: number) => {
      const d = dirOf(dirfd, R.PATH_REMOVE_DIRECTORY);
      d.dir.rmdir(str(pathPtr, pathLen));
      return E.SUCCESS;
    },
    path_unlink_file: (dirfd: number, pathPtr: number, pathLen: number) => {
      const d = dirOf(dirfd, R.PATH_UNLINK_FILE);
      d.dir.unlink(str(pathPtr, pathLen));
      return E.SUCCESS;
    },
    path_filestat_get: (
      dirfd: number,
      lookupflags: number,
      pathPtr: number,
      pathLen: number,
      out: number,
    ) => {
      const d = dirOf(dirfd, R.PATH_FILESTAT_GET);
      writeFilestat(out, d.dir.stat(str(pathPtr, pathLen), { follow: follow(lookupflags) }));
      return E.SUCCESS;
    },
    path_filestat_set_times: (
      dirfd: number,
      lookupflags: number,
      pathPtr: number,
      pathLen: number,
      atim: bigint,
      mtim: bigint,
      flags: number,
    ) => {
      const d = dirOf(dirfd, R.PATH_FILESTAT_SET_TIMES);
      const p = str(pathPtr, pathLen);
      const f = { follow: follow(lookupflags) };
      const t = times(atim, mtim, flags);
      d.dir.stat(p, f);
      d.dir.utimes(p, f, t);
      return E.SUCCESS;
    },
    path_link: (
      oldfd: number,
      oldflags: number,
      oldPtr: number,
      oldLen: number,
      newfd: number,
      newPtr: number,
      newLen: number,
    ) => {
      const a = dirOf(oldfd, R.PATH_LINK_SOURCE);
      const b = dirOf(newfd, R.PATH_LINK_TARGET);
      a.dir.link(str(oldPtr, oldLen), { follow: follow(oldflags) }, b.dir, str(newPtr, newLen));
      return E.SUCCESS;
    },
    path_rename: (
      oldfd: number,
      oldPtr: number,
      oldLen: number,
      newfd: number,
      newPtr: number,
      newLen: number,
    ) => {
      const a = dirOf(oldfd, R.PATH_RENAME_SOURCE);
      const b = dirOf(newfd, R.PATH_RENAME_TARGET);
      a.dir.rename(str(oldPtr, oldLen), b.dir, str(newPtr, newLen));
      return E.SUCCESS;
    },
    path_symlink: (oldPtr: number, oldLen: number, dirfd: number, newPtr: number, newLen: number) => {
      const d = dirOf(dirfd, R.PATH_SYMLINK);
      d.dir.symlink(str(oldPtr, oldLen), str(newPtr, newLen));
      return E.SUCCESS;
    },
    path_readlink: (
      dirfd: number,
      pathPtr: number,
      pathLen: number,
      buf: number,
      bufLen: number,
      used: number,
    ) => {
      const d = dirOf(dirfd, R.PATH_READLINK);
      const target = encoder.encode(d.dir.readlink(str(pathPtr, pathLen)));
      const n = Math.min(target.length, bufLen >>> 0);
      bytes(buf, n).set(target.subarray(0, n));
      mem().setUint32(used >>> 0, n, true);
      return E.SUCCESS;
    },

    poll_oneoff: (inPtr: number, outPtr: number, nsubs: number, neventsPtr: number) => {
      const n = nsubs >>> 0;
      if (n === 0) return E.INVAL;
      const dv = mem();
      const inAt = inPtr >>> 0;
      const outAt = outPtr >>> 0;
      let count = 0;
      const event = (i: number, type: number, errno: number, nbytes: bigint, flags: number): void => {
        const ev = outAt + count * 32;
        dv.setBigUint64(ev, dv.getBigUint64(inAt + i * 48, true), true);
        dv.setUint16(ev + 8, errno, true);
        dv.setUint8(ev + 10, type);
        dv.setBigUint64(ev + 16, nbytes, true);
        dv.setUint16(ev + 24, flags, true);
        count += 1;
      };
      const waits: Array<bigint | undefined> = [];
      let anyReady = false;
      for (let i = 0; i < n; i++) {
        const sub = inAt + i * 48;
        const type = dv.getUint8(sub + 8);
        if (type === EVENTTYPE.CLOCK) {
          const clockId = dv.getUint32(sub + 16, true);
          const timeout = dv.getBigUint64(sub + 24, true);
          const absolute = (dv.getUint16(sub + 40, true) & 1) !== 0;
          const now = clockId === CLOCK.REALTIME ? BigInt(Date.now()) * 1_000_000n : process.hrtime.bigint();
          waits.push(absolute ? (timeout > now ? timeout - now : 0n) : timeout);
        } else {
          waits.push(undefined);
          anyReady = true;
        }
      }
      if (anyReady) {
        // Streams here are memory or regular files: always ready.
        for (let i = 0; i < n; i++) {
          if (waits[i] !== undefined) continue;
          const sub = inAt + i * 48;
          const type = dv.getUint8(sub + 8);
          const fd = dv.getUint32(sub + 16, true);
          const e = table.get(fd);
          if (e === undefined) event(i, type, E.BADF, 0n, 0);
          else if (type === EVENTTYPE.FD_READ) {
            let left = 0n;
            if (e.kind === 'stdio') left = e.n === 0 ? BigInt(options.stdin.length - stdinPos) : 0n;
            else if (e.kind === 'file') {
              const size = fstatSync(e.fd, { bigint: true }).size;
              left = size > e.pos ? size - e.pos : 0n;
            }
            event(i, type, E.SUCCESS, left, e.kind === 'stdio' && left === 0n ? 1 : 0);
          } else event(i, type, E.SUCCESS, 65_536n, 0);
        }
      } else {
        const clocks = waits.filter((w): w is bigint => w !== undefined);
        const least = clocks.reduce((a, b) => (b < a ? b : a));
        // Atomics.wait, not a native sleep: worker.terminate() interrupts it at the call's timeout.
        if (least > 0n) {
          sleeper ??= new Int32Array(new SharedArrayBuffer(4));
          Atomics.wait(sleeper, 0, 0, Number(least / 1_000n) / 1_000);
        }
        waits.forEach((w, i) => {
          if (w === least) event(i, EVENTTYPE.CLOCK, E.SUCCESS, 0n, 0);
        });
      }
      dv.setUint32(neventsPtr >>> 0, count, true);
      return E.SUCCESS;
    },
  };

  function putStrings(list: readonly string[], ptrs: number, buf: number): number {
    const dv = mem();
    let at = buf >>> 0;
    list.forEach((s, i) => {
      dv.setUint32((ptrs >>> 0) + i * 4, at, true);
      const b = encoder.encode(s);
      bytes(at, b.length + 1).set([...b, 0]);
      at += b.length + 1;
    });
    return E.SUCCESS;
  }

  // Every call: a WasiError is its errno; a host error with a code maps to preview1's; a guest
  // pointer outside its memory is EFAULT. Anything else (exit, output cap) stops the guest.
  const imports: Record<string, (...args: never[]) => number | undefined> = {};
  for (const name of options.names ?? Object.keys(fns)) {
    const fn = fns[name];
    // A name preview1 does not define stays unlinked: instantiating the module fails, as before.
    if (fn === undefined || !Object.hasOwn(fns, name)) continue;
    imports[name] = (...args: never[]) => {
      try {
        return fn(...args);
      } catch (err) {
        if (err instanceof WasiError) return err.errno;
        if (err instanceof RangeError) return E.FAULT;
        const c = (err as { code?: unknown } | null)?.code;
        if (typeof c === 'string' && !(err instanceof Preview1Exit)) return ERRNO_OF[c] ?? E.IO;
        throw err;
      }
    };
  }
  return { imports, close };
}
