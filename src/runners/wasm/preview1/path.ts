/**
 * preview1's path_* functions of one call: every path resolved by ConfinedDir beneath the directory
 * fd it names; read-only grants refuse changes with EROFS.
 *
 * Self-contained (only `node:` imports and siblings that have only those): the worker loads it.
 */
import { constants, fstatSync } from 'node:fs';
import { DIR_RIGHTS, E, FDFLAGS, FILE_RIGHTS, OFLAGS, R } from './abi.js';
import {
  encoder,
  follow,
  MAX_OPEN_FDS,
  MAX_U64,
  times,
  U64,
  type DirEntry,
  type Preview1Call,
  type Preview1Function,
} from './call.js';

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
/** The rights a read-only grant drops from what an open asks for. */
const RO_DROPPED = R.FD_ALLOCATE | R.FD_FILESTAT_SET_SIZE | R.FD_FILESTAT_SET_TIMES;

/** A guest path beneath a directory fd: the fd, the path's pointer and length, the right the call needs. */
type DirPath = [fd: number, ptr: number, len: number, right: bigint];
/** A guest path read, with the directory it is beneath. */
type GuestPath = { dir: DirEntry['dir']; path: string };

/**
 * The two paths of path_link and path_rename, each beneath its own directory fd with its own right:
 * both fds are checked before either path is read.
 */
function twoPaths(
  c: Preview1Call,
  [fromFd, fromPtr, fromLen, fromRight]: DirPath,
  [toFd, toPtr, toLen, toRight]: DirPath,
): [from: GuestPath, to: GuestPath] {
  const from = c.dirOf(fromFd, fromRight);
  const to = c.dirOf(toFd, toRight);
  return [
    { dir: from.dir, path: c.str(fromPtr, fromLen) },
    { dir: to.dir, path: c.str(toPtr, toLen) },
  ];
}

export const PATH_FUNCTIONS: Record<string, Preview1Function> = {
  path_open: (
    c,
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
    const d = c.dirOf(dirfd, R.PATH_OPEN);
    // Host fds are the capsule process's own: one call cannot exhaust them for everyone else.
    if (c.table.size >= MAX_OPEN_FDS) return E.MFILE;
    const guestPath = c.str(pathPtr, pathLen);
    if ((oflags & OFLAGS.CREAT) !== 0) c.need(d, R.PATH_CREATE_FILE);
    if ((oflags & OFLAGS.TRUNC) !== 0) c.need(d, R.PATH_FILESTAT_SET_SIZE);
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
      (((write || (oflags & OFLAGS.CREAT) !== 0) && !asDir) || (oflags & (OFLAGS.CREAT | OFLAGS.TRUNC)) !== 0)
    ) {
      d.dir.refused((oflags & OFLAGS.CREAT) !== 0 ? 'create' : 'write', guestPath);
      return E.ROFS;
    }
    let hostFd: number;
    try {
      hostFd = d.dir.openFile(guestPath, { follow: follow(lookupflags), flags, mode: 0o666 });
    } catch (err) {
      // A directory opened for writing: retry read-only, as POSIX open of a dir with O_RDWR is EISDIR.
      if ((err as { code?: string }).code === 'EISDIR' && !asDir && (oflags & OFLAGS.CREAT) === 0 && write) {
        if ((oflags & OFLAGS.TRUNC) !== 0) throw err;
        hostFd = d.dir.openFile(guestPath, { follow: follow(lookupflags), flags: O_RDONLY | O_DIRECTORY });
      } else throw err;
    }
    const st = fstatSync(hostFd);
    const fd = c.nextFd();
    if (st.isDirectory()) {
      c.table.set(fd, {
        kind: 'dir',
        dir: d.dir.adoptDir(hostFd),
        preopen: undefined,
        listing: undefined,
        rights: wanted & DIR_RIGHTS,
        inheriting: wantedInheriting,
        fdflags: fdflags & ~FDFLAGS.APPEND,
      });
    } else {
      c.table.set(fd, {
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
    c.mem().setUint32(fdOut >>> 0, fd, true);
    return E.SUCCESS;
  },
  path_create_directory: (c, dirfd: number, pathPtr: number, pathLen: number) => {
    const d = c.dirOf(dirfd, R.PATH_CREATE_DIRECTORY);
    d.dir.mkdir(c.str(pathPtr, pathLen));
    return E.SUCCESS;
  },
  path_remove_directory: (c, dirfd: number, pathPtr: number, pathLen: number) => {
    const d = c.dirOf(dirfd, R.PATH_REMOVE_DIRECTORY);
    d.dir.rmdir(c.str(pathPtr, pathLen));
    return E.SUCCESS;
  },
  path_unlink_file: (c, dirfd: number, pathPtr: number, pathLen: number) => {
    const d = c.dirOf(dirfd, R.PATH_UNLINK_FILE);
    d.dir.unlink(c.str(pathPtr, pathLen));
    return E.SUCCESS;
  },
  path_filestat_get: (
    c,
    dirfd: number,
    lookupflags: number,
    pathPtr: number,
    pathLen: number,
    out: number,
  ) => {
    const d = c.dirOf(dirfd, R.PATH_FILESTAT_GET);
    c.writeFilestat(out, d.dir.stat(c.str(pathPtr, pathLen), { follow: follow(lookupflags) }));
    return E.SUCCESS;
  },
  path_filestat_set_times: (
    c,
    dirfd: number,
    lookupflags: number,
    pathPtr: number,
    pathLen: number,
    atim: bigint,
    mtim: bigint,
    flags: number,
  ) => {
    const d = c.dirOf(dirfd, R.PATH_FILESTAT_SET_TIMES);
    const p = c.str(pathPtr, pathLen);
    const f = { follow: follow(lookupflags) };
    const t = times(atim, mtim, flags);
    d.dir.stat(p, f);
    d.dir.utimes(p, f, t);
    return E.SUCCESS;
  },
  path_link: (
    c,
    oldfd: number,
    oldflags: number,
    oldPtr: number,
    oldLen: number,
    newfd: number,
    newPtr: number,
    newLen: number,
  ) => {
    const [from, to] = twoPaths(
      c,
      [oldfd, oldPtr, oldLen, R.PATH_LINK_SOURCE],
      [newfd, newPtr, newLen, R.PATH_LINK_TARGET],
    );
    from.dir.link(from.path, { follow: follow(oldflags) }, to.dir, to.path);
    return E.SUCCESS;
  },
  path_rename: (
    c,
    oldfd: number,
    oldPtr: number,
    oldLen: number,
    newfd: number,
    newPtr: number,
    newLen: number,
  ) => {
    const [from, to] = twoPaths(
      c,
      [oldfd, oldPtr, oldLen, R.PATH_RENAME_SOURCE],
      [newfd, newPtr, newLen, R.PATH_RENAME_TARGET],
    );
    from.dir.rename(from.path, to.dir, to.path);
    return E.SUCCESS;
  },
  path_symlink: (c, oldPtr: number, oldLen: number, dirfd: number, newPtr: number, newLen: number) => {
    const d = c.dirOf(dirfd, R.PATH_SYMLINK);
    d.dir.symlink(c.str(oldPtr, oldLen), c.str(newPtr, newLen));
    return E.SUCCESS;
  },
  path_readlink: (
    c,
    dirfd: number,
    pathPtr: number,
    pathLen: number,
    buf: number,
    bufLen: number,
    used: number,
  ) => {
    const d = c.dirOf(dirfd, R.PATH_READLINK);
    const target = encoder.encode(d.dir.readlink(c.str(pathPtr, pathLen)));
    const n = Math.min(target.length, bufLen >>> 0);
    c.bytes(buf, n).set(target.subarray(0, n));
    c.mem().setUint32(used >>> 0, n, true);
    return E.SUCCESS;
  },
};
