import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { E, OFLAGS, R } from '../../../../../src/runners/wasm/preview1/abi.js';
import { MAX_OPEN_FDS, Preview1Exit } from '../../../../../src/runners/wasm/preview1/call.js';
import { createPreview1, preview1Imports } from '../../../../../src/runners/wasm/preview1/host.js';
import type { Preview1Host } from '../../../../../src/runners/wasm/preview1/host.js';
import { WriteBudget } from '../../../../../src/runners/wasm/confined-dir.js';

// The host's calls driven directly, as a guest would through its imports, on a real folder.
let base: string;
let host: Preview1Host;
let buffer: ArrayBuffer;
const out: Uint8Array[] = [];

type Fn = (...args: Array<number | bigint>) => number;
const call = (name: string, ...args: Array<number | bigint>): number =>
  (host.imports[name] as unknown as Fn)(...args);
const dv = (): DataView => new DataView(buffer);
/** Puts a string at `at` and returns [ptr, len]. */
const put = (s: string, at: number): [number, number] => {
  const b = Buffer.from(s);
  new Uint8Array(buffer, at, b.length).set(b);
  return [at, b.length];
};

function open(dirfd: number, p: string, oflags: number, rights: bigint, fdflags = 0): number {
  const [ptr, len] = put(p, 1024);
  const errno = call('path_open', dirfd, 0, ptr, len, oflags, rights, 0n, fdflags, 16);
  return errno === 0 ? dv().getUint32(16, true) : -errno;
}

let writes: WriteBudget;

function make(readOnly: boolean, writeBytes = 1 << 20): void {
  writes = new WriteBudget(writeBytes);
  buffer = new ArrayBuffer(65_536);
  host = createPreview1({
    args: ['t'],
    env: {},
    stdin: new Uint8Array(0),
    stdout: { write: (b) => out.push(b.slice()) },
    stderr: { write: () => {} },
    preopens: [{ guest: '/g', host: path.join(base, 'g'), readOnly }],
    memory: () => ({ buffer }),
    writes,
  });
}

beforeEach(() => {
  base = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'capsule-p1host-')));
  mkdirSync(path.join(base, 'g'));
  writeFileSync(path.join(base, 'g', 'f.txt'), 'original');
});
afterEach(() => {
  host.close();
  rmSync(base, { recursive: true, force: true });
});

describe('preview1 host: a read-only preopen, fd by fd', () => {
  it('refuses every fd-level change on a file opened from it; the host file is unchanged', () => {
    make(true);
    const before = statSync(path.join(base, 'g', 'f.txt'));
    const all =
      R.FD_READ | R.FD_WRITE | R.FD_SEEK | R.FD_ALLOCATE | R.FD_FILESTAT_SET_SIZE | R.FD_FILESTAT_SET_TIMES;
    expect(open(3, 'f.txt', 0, all)).toBe(-E.ROFS);
    expect(open(3, 'f.txt', OFLAGS.TRUNC, R.FD_READ)).toBe(-E.ROFS);
    expect(open(3, 'new.txt', OFLAGS.CREAT, R.FD_READ)).toBe(-E.ROFS);
    const fd = open(
      3,
      'f.txt',
      0,
      R.FD_READ |
        R.FD_SEEK |
        R.FD_FILESTAT_SET_SIZE |
        R.FD_FILESTAT_SET_TIMES |
        R.FD_ALLOCATE |
        R.FD_FDSTAT_SET_FLAGS,
    );
    expect(fd).toBeGreaterThan(3);
    expect(call('fd_filestat_set_size', fd, 0n)).toBe(E.ROFS);
    expect(call('fd_allocate', fd, 0n, 100n)).toBe(E.ROFS);
    expect(call('fd_filestat_set_times', fd, 0n, 0n, 4)).toBe(E.ROFS);
    expect(call('fd_fdstat_set_flags', fd, 1)).toBe(E.ROFS);
    put('x', 2048);
    dv().setUint32(0, 2048, true);
    dv().setUint32(4, 1, true);
    expect(call('fd_write', fd, 0, 1, 8)).not.toBe(E.SUCCESS);
    expect(call('fd_pwrite', fd, 0, 1, 0n, 8)).not.toBe(E.SUCCESS);
    expect(call('fd_filestat_set_times', 3, 0n, 0n, 4)).toBe(E.ROFS);
    expect(readFileSync(path.join(base, 'g', 'f.txt'), 'utf8')).toBe('original');
    expect(statSync(path.join(base, 'g', 'f.txt')).mtimeMs).toBe(before.mtimeMs);
  });
});

describe('preview1 host: limits.writeBytes', () => {
  const RW = R.FD_READ | R.FD_WRITE | R.FD_SEEK | R.FD_ALLOCATE | R.FD_FILESTAT_SET_SIZE;

  it('counts fd_allocate growth: past the budget it is NOSPC and the file keeps its size', () => {
    make(false, 1000);
    const fd = open(3, 'f.txt', 0, RW);
    expect(call('fd_allocate', fd, 0n, 1n << 40n)).toBe(E.NOSPC);
    expect(statSync(path.join(base, 'g', 'f.txt')).size).toBe(8);
    expect(writes.exceeded).toBe(true);
    // Within what is left (1000 bytes) it grows; an allocate inside the file costs nothing.
    expect(call('fd_allocate', fd, 0n, 1008n)).toBe(E.SUCCESS);
    expect(call('fd_allocate', fd, 0n, 10n)).toBe(E.SUCCESS);
    expect(statSync(path.join(base, 'g', 'f.txt')).size).toBe(1008);
    expect(writes.left).toBe(0);
  });

  it('counts appends and shrinking is free', () => {
    make(false, 10);
    const fd = open(3, 'f.txt', 0, RW, 1 /* FDFLAGS.APPEND */);
    const [ptr, len] = put('0123456789abcdef', 2048);
    dv().setUint32(0, ptr, true);
    dv().setUint32(4, len, true);
    expect(call('fd_write', fd, 0, 1, 8)).toBe(E.SUCCESS);
    expect(dv().getUint32(8, true)).toBe(10);
    expect(call('fd_write', fd, 0, 1, 8)).toBe(E.NOSPC);
    expect(readFileSync(path.join(base, 'g', 'f.txt'), 'utf8')).toBe('original0123456789');
    expect(call('fd_filestat_set_size', fd, 0n)).toBe(E.SUCCESS);
    expect(call('fd_filestat_set_size', fd, 1n)).toBe(E.NOSPC);
  });
});

describe('preview1 host: rights', () => {
  it('narrows rights and never widens them; a dropped right is enforced', () => {
    make(false);
    const fd = open(3, 'f.txt', 0, R.FD_READ | R.FD_SEEK);
    expect(fd).toBeGreaterThan(3);
    expect(call('fd_fdstat_set_rights', fd, R.FD_SEEK, 0n)).toBe(E.SUCCESS);
    dv().setUint32(0, 2048, true);
    dv().setUint32(4, 8, true);
    expect(call('fd_read', fd, 0, 1, 8)).toBe(E.NOTCAPABLE);
    expect(call('fd_fdstat_set_rights', fd, R.FD_SEEK | R.FD_READ, 0n)).toBe(E.NOTCAPABLE);
    // A directory fd without PATH_CREATE_FILE cannot create, whatever its preopen could.
    const sub = open(3, '.', OFLAGS.DIRECTORY, R.PATH_OPEN);
    expect(open(sub, 'made.txt', OFLAGS.CREAT, R.FD_WRITE)).toBe(-E.NOTCAPABLE);
    expect(() => statSync(path.join(base, 'g', 'made.txt'))).toThrow();
  });

  it('gives a file opened for writing on a rw preopen what it asked, writes through to the host', () => {
    make(false);
    const fd = open(3, 'w.txt', OFLAGS.CREAT, R.FD_WRITE);
    put('hello', 2048);
    dv().setUint32(0, 2048, true);
    dv().setUint32(4, 5, true);
    expect(call('fd_write', fd, 0, 1, 8)).toBe(E.SUCCESS);
    expect(readFileSync(path.join(base, 'g', 'w.txt'), 'utf8')).toBe('hello');
  });
});

describe('preview1 host: the rest of the ABI', () => {
  it('answers a pointer outside memory with EFAULT and an unknown fd with EBADF', () => {
    make(false);
    expect(call('fd_write', 1, 70_000, 1, 8)).toBe(E.FAULT);
    expect(call('fd_close', 99)).toBe(E.BADF);
    expect(call('sock_shutdown', 99, 0)).toBe(E.BADF);
    expect(call('sock_shutdown', 1, 0)).toBe(E.NOTSOCK);
  });

  it('caps the fds one call may hold open (EMFILE), so a guest cannot exhaust the host process', () => {
    make(false);
    const fds: number[] = [];
    let last = 0;
    for (let i = 0; i < MAX_OPEN_FDS + 10; i++) {
      last = open(3, 'f.txt', 0, R.FD_READ);
      if (last < 0) break;
      fds.push(last);
    }
    expect(last).toBe(-E.MFILE);
    expect(fds.length).toBe(MAX_OPEN_FDS - 4);
    expect(call('fd_close', fds[0] as number)).toBe(E.SUCCESS);
    expect(open(3, 'f.txt', 0, R.FD_READ)).toBeGreaterThan(3);
  });

  it('ends the guest on proc_exit with its code', () => {
    make(false);
    expect(() => call('proc_exit', 7)).toThrow(Preview1Exit);
  });

  it('closes every host fd it opened', () => {
    make(false);
    const fd = open(3, 'f.txt', 0, R.FD_READ);
    expect(fd).toBeGreaterThan(3);
    host.close();
    // Closed: further calls see no preopen.
    expect(call('fd_prestat_get', 3, 0)).toBe(E.BADF);
  });
});

describe('preview1 host: only the imported functions', () => {
  it('wraps just the names a module imports; a name preview1 does not define (or an Object built-in) stays unlinked', () => {
    make(false);
    host.close();
    host = createPreview1({
      args: ['t'],
      env: {},
      stdin: new Uint8Array(0),
      stdout: { write: () => {} },
      stderr: { write: () => {} },
      preopens: [],
      memory: () => ({ buffer }),
      writes,
      names: preview1Imports([
        { module: 'wasi_snapshot_preview1', name: 'fd_write', kind: 'function' },
        { module: 'wasi_snapshot_preview1', name: 'toString', kind: 'function' },
        { module: 'wasi_snapshot_preview1', name: 'no_such_call', kind: 'function' },
        { module: 'env', name: 'proc_exit', kind: 'function' },
      ]),
    });
    expect(Object.keys(host.imports)).toEqual(['fd_write']);
    // Control: without `names` every preview1 function is there, and still no built-in.
    const all = createPreview1({
      args: ['t'],
      env: {},
      stdin: new Uint8Array(0),
      stdout: { write: () => {} },
      stderr: { write: () => {} },
      preopens: [],
      memory: () => ({ buffer }),
      writes,
    });
    expect(Object.keys(all.imports)).toEqual(expect.arrayContaining(['fd_write', 'proc_exit', 'path_open']));
    expect(Object.hasOwn(all.imports, 'toString')).toBe(false);
    all.close();
  });
});
