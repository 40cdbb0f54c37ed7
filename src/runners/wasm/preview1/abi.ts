/**
 * WASI preview1 (`wasi_snapshot_preview1`) numbers capsule's host uses: errno, rights, flags and
 * file types, as the witx of the snapshot defines them. Self-contained (the worker loads it).
 */

export const E = {
  SUCCESS: 0,
  TOOBIG: 1,
  ACCES: 2,
  AGAIN: 6,
  BADF: 8,
  BUSY: 10,
  EXIST: 20,
  FAULT: 21,
  FBIG: 22,
  ILSEQ: 25,
  INVAL: 28,
  IO: 29,
  ISDIR: 31,
  LOOP: 32,
  MFILE: 33,
  MLINK: 34,
  NAMETOOLONG: 37,
  NFILE: 41,
  NOENT: 44,
  NOMEM: 48,
  NOSPC: 51,
  NOSYS: 52,
  NOTDIR: 54,
  NOTEMPTY: 55,
  NOTSOCK: 57,
  NOTSUP: 58,
  NXIO: 60,
  OVERFLOW: 61,
  PERM: 63,
  ROFS: 69,
  SPIPE: 70,
  TXTBSY: 74,
  XDEV: 75,
  NOTCAPABLE: 76,
} as const;

/** Host error codes (Node's `err.code`, and ConfinedError's) to preview1 errno. */
export const ERRNO_OF: Readonly<Record<string, number>> = {
  E2BIG: E.TOOBIG,
  EACCES: E.ACCES,
  EAGAIN: E.AGAIN,
  EBADF: E.BADF,
  EBUSY: E.BUSY,
  EEXIST: E.EXIST,
  EFAULT: E.FAULT,
  EFBIG: E.FBIG,
  EILSEQ: E.ILSEQ,
  EINVAL: E.INVAL,
  EIO: E.IO,
  EISDIR: E.ISDIR,
  ELOOP: E.LOOP,
  EMFILE: E.MFILE,
  EMLINK: E.MLINK,
  ENAMETOOLONG: E.NAMETOOLONG,
  ENFILE: E.NFILE,
  ENOENT: E.NOENT,
  ENOMEM: E.NOMEM,
  ENOSPC: E.NOSPC,
  ENOSYS: E.NOSYS,
  ENOTDIR: E.NOTDIR,
  ENOTEMPTY: E.NOTEMPTY,
  ENOTSUP: E.NOTSUP,
  EOPNOTSUPP: E.NOTSUP,
  ENXIO: E.NXIO,
  EOVERFLOW: E.OVERFLOW,
  EPERM: E.PERM,
  EROFS: E.ROFS,
  ESPIPE: E.SPIPE,
  ETXTBSY: E.TXTBSY,
  EXDEV: E.XDEV,
  ENOTCAPABLE: E.NOTCAPABLE,
};

export const FILETYPE = {
  UNKNOWN: 0,
  BLOCK_DEVICE: 1,
  CHARACTER_DEVICE: 2,
  DIRECTORY: 3,
  REGULAR_FILE: 4,
  SOCKET_STREAM: 6,
  SYMBOLIC_LINK: 7,
} as const;

const bit = (n: number): bigint => 1n << BigInt(n);
export const R = {
  FD_DATASYNC: bit(0),
  FD_READ: bit(1),
  FD_SEEK: bit(2),
  FD_FDSTAT_SET_FLAGS: bit(3),
  FD_SYNC: bit(4),
  FD_TELL: bit(5),
  FD_WRITE: bit(6),
  FD_ADVISE: bit(7),
  FD_ALLOCATE: bit(8),
  PATH_CREATE_DIRECTORY: bit(9),
  PATH_CREATE_FILE: bit(10),
  PATH_LINK_SOURCE: bit(11),
  PATH_LINK_TARGET: bit(12),
  PATH_OPEN: bit(13),
  FD_READDIR: bit(14),
  PATH_READLINK: bit(15),
  PATH_RENAME_SOURCE: bit(16),
  PATH_RENAME_TARGET: bit(17),
  PATH_FILESTAT_GET: bit(18),
  PATH_FILESTAT_SET_SIZE: bit(19),
  PATH_FILESTAT_SET_TIMES: bit(20),
  FD_FILESTAT_GET: bit(21),
  FD_FILESTAT_SET_SIZE: bit(22),
  FD_FILESTAT_SET_TIMES: bit(23),
  PATH_SYMLINK: bit(24),
  PATH_REMOVE_DIRECTORY: bit(25),
  PATH_UNLINK_FILE: bit(26),
  POLL_FD_READWRITE: bit(27),
  SOCK_SHUTDOWN: bit(28),
  SOCK_ACCEPT: bit(29),
} as const;

/** Rights that mean something on a regular file. */
export const FILE_RIGHTS =
  R.FD_DATASYNC |
  R.FD_READ |
  R.FD_SEEK |
  R.FD_FDSTAT_SET_FLAGS |
  R.FD_SYNC |
  R.FD_TELL |
  R.FD_WRITE |
  R.FD_ADVISE |
  R.FD_ALLOCATE |
  R.FD_FILESTAT_GET |
  R.FD_FILESTAT_SET_SIZE |
  R.FD_FILESTAT_SET_TIMES |
  R.POLL_FD_READWRITE;

/** Rights that mean something on a directory. */
export const DIR_RIGHTS =
  R.FD_FDSTAT_SET_FLAGS |
  R.FD_SYNC |
  R.FD_ADVISE |
  R.PATH_CREATE_DIRECTORY |
  R.PATH_CREATE_FILE |
  R.PATH_LINK_SOURCE |
  R.PATH_LINK_TARGET |
  R.PATH_OPEN |
  R.FD_READDIR |
  R.PATH_READLINK |
  R.PATH_RENAME_SOURCE |
  R.PATH_RENAME_TARGET |
  R.PATH_FILESTAT_GET |
  R.PATH_FILESTAT_SET_SIZE |
  R.PATH_FILESTAT_SET_TIMES |
  R.FD_FILESTAT_GET |
  R.FD_FILESTAT_SET_TIMES |
  R.PATH_SYMLINK |
  R.PATH_REMOVE_DIRECTORY |
  R.PATH_UNLINK_FILE |
  R.POLL_FD_READWRITE;

/** Rights of stdin/stdout/stderr (in-memory streams: no seeking, so libc sees no tty). */
export const STDIO_RIGHTS = R.FD_READ | R.FD_WRITE | R.FD_FILESTAT_GET | R.POLL_FD_READWRITE;

export const OFLAGS = { CREAT: 1, DIRECTORY: 2, EXCL: 4, TRUNC: 8 } as const;
export const FDFLAGS = { APPEND: 1, DSYNC: 2, NONBLOCK: 4, RSYNC: 8, SYNC: 16 } as const;
export const LOOKUP_SYMLINK_FOLLOW = 1;
export const FSTFLAGS = { ATIM: 1, ATIM_NOW: 2, MTIM: 4, MTIM_NOW: 8 } as const;
export const WHENCE = { SET: 0, CUR: 1, END: 2 } as const;
export const CLOCK = { REALTIME: 0, MONOTONIC: 1, PROCESS_CPUTIME: 2, THREAD_CPUTIME: 3 } as const;
export const EVENTTYPE = { CLOCK: 0, FD_READ: 1, FD_WRITE: 2 } as const;
