/**
 * wasi:filesystem for components: the granted folders as preopens, working directly on the host
 * folders (no copy). Every path a guest names is walked by the one confined resolver
 * (confined-dir.ts) beneath the directory descriptor it was given; a read-only grant refuses every
 * modifying call with `read-only`, and renames and links stay within one preopen. Errors are wasi:filesystem error-codes (thrown as
 * strings, which the transpiled glue returns as the `err` of the call's result).
 */
import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  readSync,
  type BigIntStats,
  type Dirent,
  type Stats,
} from 'node:fs';
import {
  assertSingleLink,
  ConfinedDir,
  ConfinedError,
  setTimes,
  type FileLog,
  type FileTimes,
  type WriteBudget,
} from './confined-dir.js';
import { MAX_OPEN_FDS } from './preview1/call.js';
import type { GuestPreopen } from './protocol.js';
import {
  InputStream,
  IoError,
  OutputStream,
  streamFailure,
  type ByteSink,
  type ByteSource,
} from './preview2-io.js';

type ErrorCode = string;

interface DescriptorFlags {
  read?: boolean;
  write?: boolean;
  mutateDirectory?: boolean;
  fileIntegritySync?: boolean;
  dataIntegritySync?: boolean;
  requestedWriteSync?: boolean;
}
interface PathFlags {
  symlinkFollow?: boolean;
}
interface OpenFlags {
  create?: boolean;
  directory?: boolean;
  exclusive?: boolean;
  truncate?: boolean;
}
interface Datetime {
  seconds: bigint;
  nanoseconds: number;
}
type NewTimestamp = { tag: 'no-change' } | { tag: 'now' } | { tag: 'timestamp'; val: Datetime };

/** Node's errno codes → wasi:filesystem error-code. */
const ERRNO: Readonly<Record<string, ErrorCode>> = {
  EACCES: 'access',
  EAGAIN: 'would-block',
  EALREADY: 'already',
  EBADF: 'bad-descriptor',
  EBUSY: 'busy',
  EDQUOT: 'quota',
  EEXIST: 'exist',
  EFBIG: 'file-too-large',
  EILSEQ: 'illegal-byte-sequence',
  EINTR: 'interrupted',
  EINVAL: 'invalid',
  EIO: 'io',
  EISDIR: 'is-directory',
  ELOOP: 'loop',
  EMLINK: 'too-many-links',
  ENAMETOOLONG: 'name-too-long',
  ENODEV: 'no-device',
  ENOENT: 'no-entry',
  ENOMEM: 'insufficient-memory',
  ENOSPC: 'insufficient-space',
  ENOTDIR: 'not-directory',
  ENOTEMPTY: 'not-empty',
  ENOTSUP: 'unsupported',
  EOPNOTSUPP: 'unsupported',
  ENXIO: 'no-such-device',
  EOVERFLOW: 'overflow',
  EPERM: 'not-permitted',
  EPIPE: 'pipe',
  EROFS: 'read-only',
  ESPIPE: 'invalid-seek',
  ETXTBSY: 'text-file-busy',
  EXDEV: 'cross-device',
};

/** The error-code for anything a host call threw (a thrown code passes through). */
function codeOf(err: unknown): ErrorCode {
  if (typeof err === 'string') return err;
  // The resolver's refusal of a path that would leave the directory.
  if (err instanceof ConfinedError && err.code === 'ENOTCAPABLE') return 'not-permitted';
  const errno = (err as NodeJS.ErrnoException | undefined)?.code;
  return (errno !== undefined ? ERRNO[errno] : undefined) ?? 'io';
}

/** Runs a host operation, turning any host failure into a thrown error-code (never a trap). */
function guarded<T>(op: () => T): T {
  try {
    return op();
  } catch (err) {
    throw codeOf(err);
  }
}

function typeOf(st: Stats | BigIntStats | Dirent): string {
  if (st.isFile()) return 'regular-file';
  if (st.isDirectory()) return 'directory';
  if (st.isSymbolicLink()) return 'symbolic-link';
  if (st.isBlockDevice()) return 'block-device';
  if (st.isCharacterDevice()) return 'character-device';
  if (st.isFIFO()) return 'fifo';
  if (st.isSocket()) return 'socket';
  return 'unknown';
}

const direntType = typeOf;

function datetime(ms: number): Datetime {
  const whole = Math.floor(ms);
  return { seconds: BigInt(Math.floor(whole / 1000)), nanoseconds: (whole % 1000) * 1_000_000 };
}

function statOf(st: Stats | BigIntStats): Record<string, unknown> {
  return {
    type: typeOf(st),
    linkCount: BigInt(st.nlink),
    size: BigInt(st.size),
    dataAccessTimestamp: datetime(Number(st.atimeMs)),
    dataModificationTimestamp: datetime(Number(st.mtimeMs)),
    statusChangeTimestamp: datetime(Number(st.ctimeMs)),
  };
}

function hashOf(st: Stats | BigIntStats): { lower: bigint; upper: bigint } {
  return { lower: BigInt(st.ino), upper: BigInt(st.dev) };
}

/** One granted folder for one call: its confined root and every host fd the call opened beneath it. */
interface Preopen {
  readonly root: ConfinedDir;
  readonly readOnly: boolean;
  /** Files and directories the guest opened (closed when it drops them, or when the call ends). */
  readonly files: Set<number>;
  readonly dirs: Set<ConfinedDir>;
  /** Shared by every preopen of the call: how many host fds the guest holds now. */
  readonly open: { count: number };
  /** Shared by every preopen of the call: limits.writeBytes. */
  readonly writes: WriteBudget;
}

/**
 * A directory descriptor is a ConfinedDir (an open host directory every path is walked beneath, see
 * confined-dir.ts); a file descriptor is an open host file the resolver checked to be inside after
 * opening it. Either way the descriptor belongs to one preopen, whose mode it keeps.
 */
class Descriptor {
  constructor(
    readonly preopen: Preopen,
    readonly dir: ConfinedDir | undefined,
    readonly fd: number | undefined,
    readonly flags: DescriptorFlags,
    /** The preopen's own root is shared by every getDirectories() answer: dropping one keeps it open. */
    readonly owned: boolean,
  ) {}

  #dir(): ConfinedDir {
    if (this.dir === undefined) throw 'not-directory';
    return this.dir;
  }
  #file(): number {
    if (this.fd === undefined) throw 'is-directory';
    if (!this.preopen.files.has(this.fd)) throw 'bad-descriptor';
    return this.fd;
  }
  #hostFd(): number {
    return this.fd !== undefined ? this.#file() : this.#dir().fd;
  }
  #writable(): void {
    if (this.preopen.readOnly) throw 'read-only';
  }
  /**
   * A change through this directory descriptor: a `ro` grant is read-only, and a descriptor opened
   * without `mutate-directory` may not change what it names either (as preview1 keeps rights per fd).
   */
  #mutates(): ConfinedDir {
    this.#writable();
    const dir = this.#dir();
    if (this.flags.mutateDirectory !== true) throw 'not-permitted';
    return dir;
  }
  /** The same preopen: renames and links never cross grants (another folder, maybe another mode). */
  #sibling(other: unknown): ConfinedDir {
    if (!(other instanceof Descriptor) || other.preopen !== this.preopen) throw 'cross-device';
    return other.#mutates();
  }

  readViaStream(offset: bigint): InputStream {
    const fd = this.#file();
    if (this.flags.read !== true) throw 'bad-descriptor';
    return new InputStream(fileSource(fd, Number(offset)));
  }
  writeViaStream(offset: bigint): OutputStream {
    const fd = this.#file();
    if (this.flags.write !== true) throw 'bad-descriptor';
    let pos = Number(offset);
    return new OutputStream(
      fileSink(
        this.preopen.writes,
        fd,
        () => pos,
        (n) => (pos += n),
      ),
    );
  }
  appendViaStream(): OutputStream {
    const fd = this.#file();
    if (this.flags.write !== true) throw 'bad-descriptor';
    return new OutputStream(
      fileSink(
        this.preopen.writes,
        fd,
        () => fstatSync(fd).size,
        () => undefined,
      ),
    );
  }
  advise(): void {}
  syncData(): void {
    guarded(() => fsyncSync(this.#hostFd()));
  }
  sync(): void {
    guarded(() => fsyncSync(this.#hostFd()));
  }
  getFlags(): DescriptorFlags {
    return this.flags;
  }
  getType(): string {
    return guarded(() => typeOf(fstatSync(this.#hostFd())));
  }
  setSize(size: bigint): void {
    this.#writable();
    const fd = this.#file();
    if (this.flags.write !== true) throw 'bad-descriptor';
    guarded(() => this.preopen.writes.setSize(fd, Number(size)));
  }
  setTimes(atime: NewTimestamp, mtime: NewTimestamp): void {
    this.#writable();
    if (this.dir !== undefined) this.#mutates();
    const fd = this.#hostFd();
    guarded(() => {
      assertSingleLink(fd);
      setTimes(`/proc/${process.pid}/fd/${fd}`, fileTimes(atime, mtime), false);
    });
  }
  read(length: bigint, offset: bigint): [Uint8Array, boolean] {
    const fd = this.#file();
    if (this.flags.read !== true) throw 'bad-descriptor';
    const buf = new Uint8Array(Math.min(Number(length), 1 << 20));
    const n = guarded(() => readSync(fd, buf, 0, buf.length, Number(offset)));
    return [buf.subarray(0, n), n < buf.length];
  }
  write(buffer: Uint8Array, offset: bigint): bigint {
    this.#writable();
    const fd = this.#file();
    if (this.flags.write !== true) throw 'bad-descriptor';
    const writes = this.preopen.writes;
    return BigInt(guarded(() => writes.write(fd, buffer, 0, buffer.length, Number(offset))));
  }
  readDirectory(): DirectoryEntryStream {
    const dir = this.#dir();
    const entries = guarded(() => dir.readdir());
    return new DirectoryEntryStream(entries.map((e) => ({ name: e.name, type: direntType(e) })));
  }
  createDirectoryAt(p: string): void {
    const dir = this.#mutates();
    guarded(() => dir.mkdir(p));
  }
  stat(): Record<string, unknown> {
    const fd = this.#hostFd();
    return guarded(() => statOf(fstatSync(fd)));
  }
  statAt(flags: PathFlags, p: string): Record<string, unknown> {
    const dir = this.#dir();
    return guarded(() => statOf(dir.stat(p, { follow: flags.symlinkFollow === true })));
  }
  setTimesAt(flags: PathFlags, p: string, atime: NewTimestamp, mtime: NewTimestamp): void {
    const dir = this.#mutates();
    guarded(() => dir.utimes(p, { follow: flags.symlinkFollow === true }, fileTimes(atime, mtime)));
  }
  linkAt(oldFlags: PathFlags, oldPath: string, newDescriptor: Descriptor, newPath: string): void {
    const dir = this.#mutates();
    const to = this.#sibling(newDescriptor);
    guarded(() => dir.link(oldPath, { follow: oldFlags.symlinkFollow === true }, to, newPath));
  }
  openAt(pathFlags: PathFlags, p: string, openFlags: OpenFlags, flags: DescriptorFlags): Descriptor {
    const dir = this.#dir();
    const modifies =
      flags.write === true ||
      flags.mutateDirectory === true ||
      openFlags.create === true ||
      openFlags.truncate === true;
    if (modifies && this.preopen.readOnly) {
      dir.refused(openFlags.create === true ? 'create' : 'write', p);
      throw 'read-only';
    }
    // A descriptor never gains rights its parent lacks.
    if (modifies && this.flags.mutateDirectory !== true) throw 'not-permitted';
    let mode =
      flags.write === true
        ? flags.read === true
          ? constants.O_RDWR
          : constants.O_WRONLY
        : constants.O_RDONLY;
    // Non-blocking: a FIFO planted in a grant must not hang the open.
    mode |= constants.O_NONBLOCK;
    if (openFlags.create === true) mode |= constants.O_CREAT;
    if (openFlags.exclusive === true) mode |= constants.O_EXCL;
    if (openFlags.truncate === true) mode |= constants.O_TRUNC;
    if (openFlags.directory === true) mode |= constants.O_DIRECTORY;
    // Host fds are the capsule process's own: a guest that never drops what it opens is stopped at
    // the same per-call cap as a preview1 guest (files and folders of all its preopens together).
    if (this.preopen.open.count >= MAX_OPEN_FDS) throw 'insufficient-memory';
    const fd = guarded(() =>
      dir.openFile(p, { follow: pathFlags.symlinkFollow === true, flags: mode, mode: 0o644 }),
    );
    let st: Stats;
    try {
      st = fstatSync(fd);
      // Only files and folders: a device or socket in a grant is not something to hand a guest.
      if (!st.isFile() && !st.isDirectory()) throw 'unsupported';
      if (st.isDirectory() && flags.write === true) throw 'is-directory';
    } catch (err) {
      closeSync(fd);
      throw codeOf(err);
    }
    if (st.isDirectory()) {
      const sub = guarded(() => dir.adoptDir(fd));
      this.preopen.dirs.add(sub);
      this.preopen.open.count += 1;
      return new Descriptor(
        this.preopen,
        sub,
        undefined,
        { read: flags.read, mutateDirectory: flags.mutateDirectory === true },
        true,
      );
    }
    this.preopen.files.add(fd);
    this.preopen.open.count += 1;
    return new Descriptor(this.preopen, undefined, fd, { read: flags.read, write: flags.write }, true);
  }
  readlinkAt(p: string): string {
    const dir = this.#dir();
    return guarded(() => dir.readlink(p));
  }
  removeDirectoryAt(p: string): void {
    const dir = this.#mutates();
    guarded(() => dir.rmdir(p));
  }
  renameAt(oldPath: string, newDescriptor: Descriptor, newPath: string): void {
    const dir = this.#mutates();
    const to = this.#sibling(newDescriptor);
    guarded(() => dir.rename(oldPath, to, newPath));
  }
  symlinkAt(oldPath: string, newPath: string): void {
    const dir = this.#mutates();
    // Refused at creation when the target leaves the directory (confined-dir.ts): the link lives
    // in the user's real folder, where host tools would follow it.
    guarded(() => dir.symlink(oldPath, newPath));
  }
  unlinkFileAt(p: string): void {
    const dir = this.#mutates();
    guarded(() => {
      if (dir.stat(p, { follow: false }).isDirectory()) throw 'is-directory';
      dir.unlink(p);
    });
  }
  isSameObject(other: Descriptor): boolean {
    if (!(other instanceof Descriptor)) return false;
    const a = this.metadataHash();
    const b = other.metadataHash();
    return a.lower === b.lower && a.upper === b.upper;
  }
  metadataHash(): { lower: bigint; upper: bigint } {
    const fd = this.#hostFd();
    return guarded(() => hashOf(fstatSync(fd)));
  }
  metadataHashAt(flags: PathFlags, p: string): { lower: bigint; upper: bigint } {
    const dir = this.#dir();
    return guarded(() => hashOf(dir.stat(p, { follow: flags.symlinkFollow === true })));
  }
  [Symbol.dispose](): void {
    if (!this.owned) return;
    if (this.fd !== undefined && this.preopen.files.delete(this.fd)) {
      closeSync(this.fd);
      this.preopen.open.count -= 1;
    }
    if (this.dir !== undefined && this.preopen.dirs.delete(this.dir)) {
      this.dir.close();
      this.preopen.open.count -= 1;
    }
  }
}

class DirectoryEntryStream {
  #next = 0;
  constructor(readonly entries: ReadonlyArray<{ name: string; type: string }>) {}
  readDirectoryEntry(): { name: string; type: string } | undefined {
    return this.entries[this.#next++];
  }
}

/** The filesystem resource classes (frozen with the host's other classes). */
export const FS_RESOURCES = [Descriptor, DirectoryEntryStream] as const;

/** wasi new-timestamps as the resolver's file times (nanoseconds; no-change leaves it out). */
function fileTimes(atime: NewTimestamp, mtime: NewTimestamp): FileTimes {
  const one = (t: NewTimestamp): bigint | 'now' | undefined =>
    t.tag === 'now'
      ? 'now'
      : t.tag === 'timestamp'
        ? t.val.seconds * 1_000_000_000n + BigInt(t.val.nanoseconds)
        : undefined;
  return { atime: one(atime), mtime: one(mtime) };
}

function fileSource(fd: number, offset: number): ByteSource {
  let pos = offset;
  return {
    read(len: number): Uint8Array | undefined {
      const buf = new Uint8Array(len);
      let n: number;
      try {
        n = readSync(fd, buf, 0, len, pos);
      } catch (err) {
        throw streamFailure(new IoError(`read failed: ${codeOf(err)}`, codeOf(err)));
      }
      if (n === 0 && len > 0) return undefined;
      pos += n;
      return buf.subarray(0, n);
    },
  };
}

function fileSink(
  writes: WriteBudget,
  fd: number,
  position: () => number,
  advance: (n: number) => void,
): ByteSink {
  return {
    write(data: Uint8Array): void {
      let done = 0;
      try {
        while (done < data.length) {
          const n = writes.write(fd, data, done, data.length - done, position());
          advance(n);
          done += n;
        }
      } catch (err) {
        throw streamFailure(new IoError(`write failed: ${codeOf(err)}`, codeOf(err)));
      }
    },
  };
}

export interface ComponentFilesystem {
  preopens: Record<string, unknown>;
  types: Record<string, unknown>;
  dispose(): void;
}

/**
 * wasi:filesystem for one call: its preopens (the job's granted folders, each opened now as a
 * ConfinedDir; a grant that is no longer a real folder fails the call) and its open files.
 */
export function componentFilesystem(
  preopens: readonly GuestPreopen[],
  hidden: ((name: string) => boolean) | undefined,
  writes: WriteBudget,
  log?: FileLog | undefined,
): ComponentFilesystem {
  const opened: Preopen[] = [];
  const roots: Array<readonly [Preopen, string, DescriptorFlags]> = [];
  const open = { count: 0 };
  try {
    for (const p of preopens) {
      const pre: Preopen = {
        root: ConfinedDir.open(p.host, { readOnly: p.readOnly, hidden, writes, log }),
        readOnly: p.readOnly,
        files: new Set(),
        open,
        writes,
        dirs: new Set(),
      };
      opened.push(pre);
      roots.push([pre, p.guest, p.readOnly ? { read: true } : { read: true, mutateDirectory: true }]);
    }
  } catch (err) {
    for (const pre of opened) pre.root.close();
    throw err;
  }
  return {
    preopens: {
      getDirectories: () =>
        roots.map(([pre, guest, flags]) => [new Descriptor(pre, pre.root, undefined, flags, false), guest]),
    },
    types: {
      Descriptor,
      DirectoryEntryStream,
      filesystemErrorCode: (err: unknown) => (err instanceof IoError ? err.code : undefined),
    },
    dispose(): void {
      for (const pre of opened) {
        for (const fd of pre.files) closeQuietly(fd);
        for (const dir of pre.dirs) dir.close();
        pre.files.clear();
        pre.dirs.clear();
        open.count = 0;
        pre.root.close();
      }
    },
  };
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Already closed.
  }
}
