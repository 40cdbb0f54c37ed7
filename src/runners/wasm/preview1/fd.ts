/**
 * preview1's fd_* functions of one call: stdio in memory (capped output), and the host fds its
 * preopens and path_open opened, within each fd's rights.
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
import { assertSingleLink, setTimes } from '../confined-dir.js';
import { E, FDFLAGS, FILETYPE, R, WHENCE } from './abi.js';
import { encoder, filetypeOf, MAX_U64, times, U64, type Preview1Function } from './call.js';

const { O_RDONLY, O_WRONLY, O_RDWR, O_APPEND } = constants;

export const FD_FUNCTIONS: Record<string, Preview1Function> = {
  fd_write: (c, fd: number, iovsPtr: number, iovsLen: number, nwritten: number) => {
    const e = c.entry(fd);
    c.need(e, R.FD_WRITE);
    let total = 0;
    if (e.kind === 'stdio') {
      if (e.n === 0) return E.BADF;
      const sink = e.n === 1 ? c.options.stdout : c.options.stderr;
      for (const b of c.iovs(iovsPtr, iovsLen)) {
        sink.write(b);
        total += b.length;
      }
    } else if (e.kind === 'file') {
      if (!e.writable) return E.BADF;
      const append = (e.fdflags & FDFLAGS.APPEND) !== 0;
      for (const b of c.iovs(iovsPtr, iovsLen)) {
        // An O_APPEND host fd writes at the end whatever the position (Linux pwrite too).
        const n = c.writes.write(e.fd, b, 0, b.length, append ? null : Number(e.pos));
        total += n;
        if (!append) e.pos += BigInt(n);
        if (n < b.length) break;
      }
      if (append) e.pos = fstatSync(e.fd, { bigint: true }).size;
    } else return E.ISDIR;
    c.mem().setUint32(nwritten >>> 0, total, true);
    return E.SUCCESS;
  },
  fd_read: (c, fd: number, iovsPtr: number, iovsLen: number, nread: number) => {
    const e = c.entry(fd);
    c.need(e, R.FD_READ);
    let total = 0;
    if (e.kind === 'stdio') {
      if (e.n !== 0) return E.BADF;
      for (const b of c.iovs(iovsPtr, iovsLen)) {
        const chunk = c.options.stdin.subarray(c.stdinPos, c.stdinPos + b.length);
        b.set(chunk);
        c.stdinPos += chunk.length;
        total += chunk.length;
        if (chunk.length < b.length) break;
      }
    } else if (e.kind === 'file') {
      if (!e.readable) return E.BADF;
      for (const b of c.iovs(iovsPtr, iovsLen)) {
        const n = readSync(e.fd, b, 0, b.length, e.pos);
        total += n;
        e.pos += BigInt(n);
        if (n < b.length) break;
      }
    } else return E.ISDIR;
    c.mem().setUint32(nread >>> 0, total, true);
    return E.SUCCESS;
  },
  fd_pread: (c, fd: number, iovsPtr: number, iovsLen: number, offset: bigint, nread: number) => {
    const e = c.fileOf(fd);
    c.need(e, R.FD_READ | R.FD_SEEK);
    if (!e.readable) return E.BADF;
    let pos = U64(offset);
    let total = 0;
    for (const b of c.iovs(iovsPtr, iovsLen)) {
      const n = readSync(e.fd, b, 0, b.length, pos);
      total += n;
      pos += BigInt(n);
      if (n < b.length) break;
    }
    c.mem().setUint32(nread >>> 0, total, true);
    return E.SUCCESS;
  },
  fd_pwrite: (c, fd: number, iovsPtr: number, iovsLen: number, offset: bigint, nwritten: number) => {
    const e = c.fileOf(fd);
    if (e.readOnly) return E.ROFS;
    c.need(e, R.FD_WRITE | R.FD_SEEK);
    if (!e.writable) return E.BADF;
    let pos = U64(offset);
    let total = 0;
    for (const b of c.iovs(iovsPtr, iovsLen)) {
      const n = c.writes.write(e.fd, b, 0, b.length, Number(pos));
      total += n;
      pos += BigInt(n);
      if (n < b.length) break;
    }
    c.mem().setUint32(nwritten >>> 0, total, true);
    return E.SUCCESS;
  },
  fd_seek: (c, fd: number, offset: bigint, whence: number, out: number) => {
    const e = c.entry(fd);
    if (e.kind === 'stdio') return E.SPIPE;
    if (e.kind === 'dir') return E.BADF;
    c.need(e, offset === 0n && whence === WHENCE.CUR ? R.FD_TELL | R.FD_SEEK : R.FD_SEEK);
    let base: bigint;
    if (whence === WHENCE.SET) base = 0n;
    else if (whence === WHENCE.CUR) base = e.pos;
    else if (whence === WHENCE.END) base = fstatSync(e.fd, { bigint: true }).size;
    else return E.INVAL;
    const next = base + BigInt.asIntN(64, offset);
    if (next < 0n || next > MAX_U64) return E.INVAL;
    e.pos = next;
    c.mem().setBigUint64(out >>> 0, next, true);
    return E.SUCCESS;
  },
  fd_tell: (c, fd: number, out: number) => {
    const e = c.entry(fd);
    if (e.kind === 'stdio') return E.SPIPE;
    if (e.kind === 'dir') return E.BADF;
    c.need(e, R.FD_TELL);
    c.mem().setBigUint64(out >>> 0, e.pos, true);
    return E.SUCCESS;
  },
  fd_close: (c, fd: number) => {
    const e = c.entry(fd);
    c.closeEntry(e);
    c.table.delete(fd >>> 0);
    return E.SUCCESS;
  },
  fd_renumber: (c, from: number, to: number) => {
    const a = c.entry(from);
    const b = c.entry(to);
    if (from >>> 0 === to >>> 0) return E.SUCCESS;
    c.closeEntry(b);
    c.table.set(to >>> 0, a);
    c.table.delete(from >>> 0);
    return E.SUCCESS;
  },
  fd_fdstat_get: (c, fd: number, out: number) => {
    const e = c.entry(fd);
    const dv = c.mem();
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
  fd_fdstat_set_flags: (c, fd: number, flags: number) => {
    const e = c.entry(fd);
    if (e.kind === 'file' && e.readOnly && (flags & FDFLAGS.APPEND) !== 0) return E.ROFS;
    c.need(e, R.FD_FDSTAT_SET_FLAGS);
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
  fd_fdstat_set_rights: (c, fd: number, base: bigint, inheriting: bigint) => {
    const e = c.entry(fd);
    const b = U64(base);
    const i = U64(inheriting);
    if ((b & ~e.rights) !== 0n || (i & ~e.inheriting) !== 0n) return E.NOTCAPABLE;
    e.rights = b;
    e.inheriting = i;
    return E.SUCCESS;
  },
  fd_filestat_get: (c, fd: number, out: number) => {
    const e = c.entry(fd);
    c.need(e, R.FD_FILESTAT_GET);
    if (e.kind === 'stdio') {
      c.bytes(out, 64).fill(0);
      c.mem().setUint8((out >>> 0) + 16, FILETYPE.CHARACTER_DEVICE);
      return E.SUCCESS;
    }
    c.writeFilestat(out, fstatSync(e.kind === 'dir' ? e.dir.fd : e.fd, { bigint: true }));
    return E.SUCCESS;
  },
  fd_filestat_set_size: (c, fd: number, size: bigint) => {
    const e = c.fileOf(fd);
    if (e.readOnly) return E.ROFS;
    c.need(e, R.FD_FILESTAT_SET_SIZE);
    if (!e.writable) return E.BADF;
    const n = U64(size);
    if (n > BigInt(Number.MAX_SAFE_INTEGER)) return E.FBIG;
    c.writes.setSize(e.fd, Number(n));
    return E.SUCCESS;
  },
  fd_filestat_set_times: (c, fd: number, atim: bigint, mtim: bigint, flags: number) => {
    const e = c.entry(fd);
    if (e.kind === 'stdio') return E.BADF;
    if (e.kind === 'dir' ? e.dir.readOnly : e.readOnly) return E.ROFS;
    c.need(e, R.FD_FILESTAT_SET_TIMES);
    const hostFd = e.kind === 'dir' ? e.dir.fd : e.fd;
    assertSingleLink(hostFd);
    setTimes(`/proc/${process.pid}/fd/${hostFd}`, times(atim, mtim, flags), false);
    return E.SUCCESS;
  },
  fd_allocate: (c, fd: number, offset: bigint, len: bigint) => {
    const e = c.fileOf(fd);
    if (e.readOnly) return E.ROFS;
    c.need(e, R.FD_ALLOCATE);
    if (!e.writable) return E.BADF;
    const end = U64(offset) + U64(len);
    if (end > BigInt(Number.MAX_SAFE_INTEGER)) return E.FBIG;
    // posix_fallocate semantics without it: a file shorter than offset+len grows to it.
    if (fstatSync(e.fd, { bigint: true }).size < end) c.writes.setSize(e.fd, Number(end));
    return E.SUCCESS;
  },
  fd_advise: (c, fd: number, offset: bigint, len: bigint, advice: number) => {
    const e = c.fileOf(fd);
    c.need(e, R.FD_ADVISE);
    if (advice < 0 || advice > 5) return E.INVAL;
    void offset;
    void len;
    return E.SUCCESS;
  },
  fd_datasync: (c, fd: number) => {
    const e = c.fileOf(fd);
    c.need(e, R.FD_DATASYNC);
    fdatasyncSync(e.fd);
    return E.SUCCESS;
  },
  fd_sync: (c, fd: number) => {
    const e = c.entry(fd);
    c.need(e, R.FD_SYNC);
    if (e.kind === 'file') fsyncSync(e.fd);
    return E.SUCCESS;
  },
  fd_prestat_get: (c, fd: number, out: number) => {
    const e = c.entry(fd);
    if (e.kind !== 'dir' || e.preopen === undefined) return E.BADF;
    const dv = c.mem();
    dv.setUint8(out >>> 0, 0);
    dv.setUint32((out >>> 0) + 4, Buffer.byteLength(e.preopen), true);
    return E.SUCCESS;
  },
  fd_prestat_dir_name: (c, fd: number, ptr: number, len: number) => {
    const e = c.entry(fd);
    if (e.kind !== 'dir' || e.preopen === undefined) return E.BADF;
    const name = encoder.encode(e.preopen);
    if (len >>> 0 < name.length) return E.NAMETOOLONG;
    c.bytes(ptr, name.length).set(name);
    return E.SUCCESS;
  },
  fd_readdir: (c, fd: number, buf: number, bufLen: number, cookie: bigint, bufused: number) => {
    const e = c.dirOf(fd, R.FD_READDIR);
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
    const out = c.bytes(buf, bufLen);
    const dv = c.mem();
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
};
