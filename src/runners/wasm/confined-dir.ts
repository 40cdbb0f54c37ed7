/**
 * The one confined path resolver for every Wasm filesystem surface (preview1 `path_*`/`fd_*`,
 * preview2 `wasi:filesystem`). A guest path is walked beneath a directory the guest holds (a
 * preopen, or a directory it opened below one) component by component, on the granted host folder
 * itself — no copy:
 *
 * - absolute paths are refused, and so is `..` above the directory the walk started from;
 * - a symlink is followed only while where it leads stays beneath that directory (its target is
 *   walked the same way, relative to the link's folder; an absolute target is an escape);
 * - the last component is not followed unless asked (`follow`), and a trailing slash means
 *   "must be a directory" (it follows, like POSIX);
 * - more than {@link MAX_SYMLINK_HOPS} symlinks in one walk is ELOOP;
 * - capsule's own state (`capsule.json`, `.capsule/`, see isReservedName in permissions) is never
 *   reachable: such a name is ENOENT, whether looked up or created;
 * - a read-only directory refuses every modification with EROFS;
 * - a regular file with more than one hard link is never opened for writing (nor its times set):
 *   its other names may lie anywhere on the filesystem (outside the grant, capsule's own state), and
 *   no path check can see them. ENOTCAPABLE, as for any way out. Reading one is allowed: a hard link
 *   needs write access to the file's folder where it is made, and reading shows the guest only what
 *   whoever planted it could already read (package stores and local git clones hard-link files that
 *   are only ever read); a write would change a file capsule cannot see by path.
 *
 * How it holds against a concurrent host (TOCTOU between resolve and use): the walk never hands the
 * kernel a path with more than one unchecked component. Each step opens the next directory relative
 * to the previous one's fd with O_NOFOLLOW|O_DIRECTORY (Node has no openat, but on Linux
 * `/proc/self/fd/<dirfd>/<name>` is exactly that: the kernel jumps to the open directory, then looks
 * up one name), so a directory swapped for a symlink mid-walk fails the open instead of being
 * followed. The final operation also runs on `<dirfd>/<name>` with calls that do not follow the last
 * component (open with O_NOFOLLOW, lstat, lutimes, unlink, rename, link, symlink, mkdir); after an
 * open, the opened file's real path (readlink of /proc/self/fd/<fd>) is checked to lie beneath the
 * directory's own, as a second line. Linux only: {@link ConfinedDir.open} refuses without /proc.
 *
 * Self-contained (only `node:` imports): the Wasm worker loads it.
 */
import {
  closeSync,
  constants,
  existsSync,
  fstatSync,
  ftruncateSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmdirSync,
  symlinkSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import type { BigIntStats, Dirent } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';

/** Symlinks one walk may follow before it is ELOOP (Linux's own limit is 40). */
export const MAX_SYMLINK_HOPS = 40;

/** O_PATH is not in Node's constants; Linux's value (an fd that names a file without opening it). */
const O_PATH = 0o10000000;
const {
  O_RDONLY,
  O_WRONLY,
  O_RDWR,
  O_CREAT,
  O_TRUNC,
  O_APPEND,
  O_EXCL,
  O_DIRECTORY,
  O_NOFOLLOW,
  O_NONBLOCK,
} = constants;
const WRITE_FLAGS = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND;

/**
 * An errno-style refusal from the resolver (a host `fs` error passes through with its own `code`).
 * `ENOTCAPABLE`: the path would leave the directory (absolute, `..` above it, a symlink out).
 */
export class ConfinedError extends Error {
  constructor(
    readonly code:
      | 'ENOTCAPABLE'
      | 'EROFS'
      | 'ELOOP'
      | 'ENOENT'
      | 'ENOTDIR'
      | 'EACCES'
      | 'EINVAL'
      | 'EEXIST'
      | 'EISDIR'
      | 'ENOSPC'
      | 'EXDEV',
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

export interface ConfinedDirOptions {
  /** Every modification through this directory (and those opened beneath it) is EROFS. */
  readOnly?: boolean | undefined;
  /** Names hidden from the guest (never looked up, listed or created). Default: none. */
  hidden?: ((name: string) => boolean) | undefined;
  /** The run's write cap: every entry this directory (and those beneath it) creates counts. */
  writes?: WriteBudget | undefined;
  /** A learning run: every call through this directory (and those beneath it) is recorded, refused or not. */
  log?: FileLog | undefined;
}

/** One filesystem call of a learning run, as capsule's host saw it. */
export interface FileLogEntry {
  op: 'read' | 'list' | 'write' | 'create' | 'remove';
  /** Host path the guest named (its grant's folder joined with the guest's path, not resolved). */
  path: string;
  outcome: 'ok' | 'failed' | 'refused';
}

/** What the guest may not do, as opposed to what is not there: recorded as refused. */
const REFUSALS = new Set(['ENOTCAPABLE', 'EROFS', 'EACCES', 'EPERM', 'EXDEV', 'ENOSPC']);

/** The calls of one learning run, shared by every directory of the call (bounded: a loop does not grow it). */
export class FileLog {
  static readonly MAX_ENTRIES = 10_000;
  readonly entries: FileLogEntry[] = [];
  readonly #seen = new Set<string>();

  add(entry: FileLogEntry): void {
    const key = `${entry.op}\0${entry.outcome}\0${entry.path}`;
    if (this.#seen.has(key) || this.entries.length >= FileLog.MAX_ENTRIES) return;
    this.#seen.add(key);
    this.entries.push(entry);
  }
}

/**
 * The run's cap on bytes written to its granted folders (`limits.writeBytes`), shared by every
 * directory and file of one call, preview1 and preview2 alike: every write to a granted file goes
 * through {@link WriteBudget.write} and every size change through {@link WriteBudget.setSize}.
 * What counts: each byte written (an overwrite counts again: this caps work done on the user's disk,
 * not the disk's growth), plus every byte a file grows by without being written — set-size,
 * allocate, or a write that starts past the end (a sparse hole still grows what the user sees and
 * copies), plus one block per new entry ({@link WriteBudget.entry}). Past the cap a call is ENOSPC and `exceeded` is set for the run's result; a write that
 * only partly fits writes what fits (a short write, as a full disk gives).
 */
/** What one new directory entry counts against the write cap (one filesystem block). */
export const ENTRY_BYTES = 4096;

export class WriteBudget {
  #left: number;
  /** A write or size change was refused at the cap. */
  exceeded = false;

  constructor(readonly limit: number) {
    this.#left = limit;
  }

  /** Bytes still allowed. */
  get left(): number {
    return this.#left;
  }

  /**
   * writeSync through the cap. `position` null writes at the fd's position (an O_APPEND fd: at its
   * end), which never leaves a hole; a number may start past the end, and the hole counts.
   */
  write(fd: number, data: Uint8Array, offset: number, length: number, position: number | null): number {
    if (length === 0) return writeSync(fd, data, offset, 0, position);
    const hole = position === null ? 0 : Math.max(0, position - fstatSync(fd).size);
    const room = this.#left - hole;
    if (room <= 0) this.#refuse(`a write of ${length} bytes`);
    const n = writeSync(fd, data, offset, Math.min(length, room), position);
    // What the kernel wrote counts; a hole counts once it exists (the write made it).
    this.#left -= n + (n > 0 ? hole : 0);
    return n;
  }

  /**
   * A new entry (file, folder, symlink, hard link): names and inodes take disk too, so a guest that
   * only creates entries in a loop stops at the cap as well. Each counts as one block
   * ({@link ENTRY_BYTES}, what it takes on disk at least) plus a symlink's target.
   */
  entry<T>(guestPath: string, extra: number, make: () => T): T {
    const cost = ENTRY_BYTES + extra;
    if (cost > this.#left) this.#refuse(`creating ${guestPath}`);
    const made = make();
    this.#left -= cost;
    return made;
  }

  /** ftruncate through the cap: shrinking is free, growing counts in full (sparse or not). */
  setSize(fd: number, size: number): void {
    const grow = size - fstatSync(fd).size;
    if (grow > this.#left) this.#refuse(`growing a file by ${grow} bytes`);
    ftruncateSync(fd, size);
    if (grow > 0) this.#left -= grow;
  }

  #refuse(what: string): never {
    this.exceeded = true;
    throw new ConfinedError('ENOSPC', `${what} passes limits.writeBytes (${this.limit} bytes)`);
  }
}

/** Where a walk ended: the last component's name inside an open directory. */
export interface Resolved {
  /** Host fd of the directory holding `name` (this directory's own fd, or one the walk opened). */
  readonly dirFd: number;
  /** The last component: a plain name, or `.` when the path named the directory itself. */
  readonly name: string;
  /** `/proc/self/fd/<dirFd>/<name>`: hand this to calls that do not follow the last component. */
  readonly path: string;
  /** The guest path ended with `/`. */
  readonly trailingSlash: boolean;
}

export interface WalkOptions {
  /** Follow a symlink in the last component (a trailing slash always does). */
  follow: boolean;
}

const fdPath = (fd: number, name?: string): string =>
  name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;

const code = (err: unknown): string | undefined => (err as { code?: string } | null)?.code;

/** Whether a name exists (not following a last symlink). */
function exists(procPath: string): boolean {
  try {
    lstatSync(procPath);
    return true;
  } catch {
    return false;
  }
}

/**
 * A host directory the guest may use, held open by fd. Every path method takes a guest path
 * relative to it. Methods throw ConfinedError or a Node fs error (with `code`); callers map codes to
 * their ABI's errno.
 */
export class ConfinedDir {
  readonly fd: number;
  readonly readOnly: boolean;
  readonly #hidden: (name: string) => boolean;
  readonly #writes: WriteBudget | undefined;
  /**
   * Which grant this directory lies in: made by {@link ConfinedDir.open}, shared by every directory
   * opened beneath it. Renames and hard links never cross it (see {@link ConfinedDir.link}).
   */
  readonly #grant: object;
  readonly #log: FileLog | undefined;
  #closed = false;

  private constructor(
    fd: number,
    readOnly: boolean,
    hidden: (name: string) => boolean,
    writes: WriteBudget | undefined,
    grant: object,
    log: FileLog | undefined,
  ) {
    this.#log = log;
    this.#writes = writes;
    this.#grant = grant;
    this.fd = fd;
    this.readOnly = readOnly;
    this.#hidden = hidden;
  }

  /**
   * Opens a granted host directory (an absolute, already canonical path). Its last component is
   * not followed: a grant that became a symlink since it was checked is refused.
   */
  static open(hostPath: string, options: ConfinedDirOptions = {}): ConfinedDir {
    if (!hostPath.startsWith('/')) throw new ConfinedError('EINVAL', `not an absolute path: ${hostPath}`);
    if (!existsSync('/proc/self/fd')) {
      throw new ConfinedError('EINVAL', 'confined directories need Linux /proc/self/fd');
    }
    let fd: number;
    try {
      fd = openSync(hostPath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    } catch (err) {
      if (code(err) === 'ELOOP' || code(err) === 'ENOTDIR') {
        throw new ConfinedError('ENOTDIR', `${hostPath} is not a directory (or is a symlink)`);
      }
      throw err;
    }
    return new ConfinedDir(
      fd,
      options.readOnly === true,
      options.hidden ?? (() => false),
      options.writes,
      {},
      options.log,
    );
  }

  /**
   * A call its host refused before it reached this directory (a write on a read-only grant): recorded like
   * one refused here, so a learning run sees every refusal.
   */
  refused(op: FileLogEntry['op'], guestPath: string): void {
    try {
      this.#seen(op, guestPath, () => {
        throw new ConfinedError('EROFS', `${guestPath}: read-only`);
      });
    } catch {
      // Recorded; the caller answers the guest.
    }
  }

  /** Runs one call of the guest's, recorded in the learning run's log (when there is one). */
  #seen<T>(op: FileLogEntry['op'], guestPath: string, call: () => T): T {
    const log = this.#log;
    if (log === undefined) return call();
    let at: string;
    try {
      at = path.resolve(this.hostPath(), guestPath);
    } catch {
      return call();
    }
    try {
      const done = call();
      log.add({ op, path: at, outcome: 'ok' });
      return done;
    } catch (err) {
      log.add({ op, path: at, outcome: REFUSALS.has(code(err) ?? '') ? 'refused' : 'failed' });
      throw err;
    }
  }

  /** The directory's current host path (for messages and the after-open check). */
  hostPath(): string {
    return readlinkSync(fdPath(this.fd));
  }

  /**
   * Walks `guestPath` beneath this directory and calls `use` with where it ended; fds the walk
   * opened are closed when `use` returns. `use` must act on `r.path` (or `r.dirFd` + `r.name`)
   * without following the last component.
   */
  at<T>(guestPath: string, options: WalkOptions, use: (r: Resolved) => T): T {
    this.#live();
    const opened: number[] = [];
    try {
      return use(this.#walk(guestPath, options.follow, opened));
    } finally {
      for (const fd of opened) closeSync(fd);
    }
  }

  /** lstat of where the path leads (with `follow`, the symlinks on it followed). */
  stat(guestPath: string, options: WalkOptions): BigIntStats {
    return this.at(guestPath, options, (r) => lstatSync(r.path, { bigint: true }));
  }

  /**
   * Opens a file or directory (Node open flags). Write flags on a read-only directory are EROFS;
   * a regular file with more than one link is ENOTCAPABLE for writing (see the header). The result
   * is a host fd the caller owns.
   */
  openFile(guestPath: string, options: WalkOptions & { flags: number; mode?: number }): number {
    const { flags } = options;
    const op =
      (flags & WRITE_FLAGS & ~O_CREAT) !== 0
        ? (flags & O_CREAT) !== 0
          ? 'create'
          : 'write'
        : (flags & O_CREAT) !== 0
          ? 'create'
          : (flags & O_DIRECTORY) !== 0
            ? 'list'
            : 'read';
    return this.#seen(op, guestPath, () => this.#openFile(guestPath, options));
  }

  #openFile(guestPath: string, options: WalkOptions & { flags: number; mode?: number }): number {
    const { flags } = options;
    if (this.readOnly && (flags & WRITE_FLAGS) !== 0) {
      throw new ConfinedError('EROFS', `${guestPath}: read-only`);
    }
    // O_EXCL|O_CREAT never follows the last component: a symlink there is EEXIST, as in POSIX.
    const follow = options.follow && !((flags & O_CREAT) !== 0 && (flags & O_EXCL) !== 0);
    return this.at(guestPath, { follow }, (r) => {
      if (r.trailingSlash && (flags & O_CREAT) !== 0) {
        throw new ConfinedError('EINVAL', `${guestPath}: cannot create a file with a trailing slash`);
      }
      // O_NONBLOCK: a FIFO planted in a grant would block open() in native code, where not even
      // the worker's termination at the call's timeout reaches it (no effect on regular files).
      // O_TRUNC waits until the link count is checked on the opened file itself (no window between a
      // check by path and the open): truncating first would already have changed a linked file.
      const truncate = (flags & O_TRUNC) !== 0;
      const open = (): number =>
        openSync(
          r.path,
          (flags & ~O_TRUNC) | O_NOFOLLOW | O_NONBLOCK | (r.trailingSlash ? O_DIRECTORY : 0),
          options.mode,
        );
      // A file this open may create counts as a new entry (told by name: a file someone else made
      // in between is charged too, which only errs toward the cap).
      const fd = (flags & O_CREAT) !== 0 && !exists(r.path) ? this.#entry(guestPath, 0, open) : open();
      try {
        this.#checkInside(fd, guestPath);
        if ((flags & WRITE_FLAGS & ~O_CREAT) !== 0) {
          const st = fstatSync(fd);
          if (st.isFile() && st.nlink > 1) {
            throw new ConfinedError(
              'ENOTCAPABLE',
              `${guestPath} has ${st.nlink} hard links (others may lie outside the grant): not opened for writing`,
            );
          }
          if (truncate && st.isDirectory()) throw new ConfinedError('EISDIR', `${guestPath}: a directory`);
          if (truncate && st.isFile()) truncateOpened(fd, flags);
        }
      } catch (err) {
        closeSync(fd);
        throw err;
      }
      return fd;
    });
  }

  /** Opens a directory beneath this one as a ConfinedDir of its own (same read-only-ness and hidden names). */
  openDir(guestPath: string, options: WalkOptions): ConfinedDir {
    const fd = this.openFile(guestPath, { ...options, flags: O_RDONLY | O_DIRECTORY });
    return new ConfinedDir(fd, this.readOnly, this.#hidden, this.#writes, this.#grant, this.#log);
  }

  /** Wraps an fd this directory's openFile returned for a directory (for fd-based callers). */
  adoptDir(fd: number): ConfinedDir {
    if (!fstatSync(fd).isDirectory()) throw new ConfinedError('ENOTDIR', 'not a directory');
    return new ConfinedDir(fd, this.readOnly, this.#hidden, this.#writes, this.#grant, this.#log);
  }

  /** Entries of this directory (no `.`/`..`), hidden names left out. */
  readdir(): Dirent[] {
    this.#live();
    return readdirSync(fdPath(this.fd), { withFileTypes: true }).filter((d) => !this.#hidden(d.name));
  }

  mkdir(guestPath: string, mode = 0o777): void {
    this.#seen('create', guestPath, () => this.#mkdir(guestPath, mode));
  }

  #mkdir(guestPath: string, mode: number): void {
    this.#writable(guestPath);
    this.at(guestPath, { follow: false }, (r) => {
      this.#entry(guestPath, 0, () => mkdirSync(r.path, mode));
    });
  }

  rmdir(guestPath: string): void {
    this.#seen('remove', guestPath, () => this.#rmdir(guestPath));
  }

  #rmdir(guestPath: string): void {
    this.#writable(guestPath);
    this.at(guestPath, { follow: false }, (r) => {
      if (r.name === '.')
        throw new ConfinedError('EINVAL', `${guestPath}: cannot remove the directory itself`);
      rmdirSync(r.path);
    });
  }

  /** Removes a non-directory. A trailing slash is ENOTDIR (on a file) or EISDIR (on a directory). */
  unlink(guestPath: string): void {
    this.#seen('remove', guestPath, () => this.#unlink(guestPath));
  }

  #unlink(guestPath: string): void {
    this.#writable(guestPath);
    this.at(guestPath, { follow: false }, (r) => {
      if (r.trailingSlash) {
        const st = lstatSync(r.path);
        throw new ConfinedError(st.isDirectory() ? 'EISDIR' : 'ENOTDIR', `${guestPath}: trailing slash`);
      }
      unlinkSync(r.path);
    });
  }

  readlink(guestPath: string): string {
    return this.at(guestPath, { follow: false }, (r) => readlinkSync(r.path));
  }

  /**
   * Creates a symlink at `guestPath`. Its target must lead downward from the link (relative, no
   * `..`; see {@link leadsDownward}), else ENOTCAPABLE at creation: the link lives in the user's
   * real folder, where host tools follow links without capsule's checks, and only downward links
   * stay inside whatever the guest later renames or links. Use-time walks check every link anyway.
   */
  symlink(target: string, guestPath: string): void {
    this.#seen('create', guestPath, () => this.#symlink(target, guestPath));
  }

  #symlink(target: string, guestPath: string): void {
    this.#writable(guestPath);
    this.at(guestPath, { follow: false }, (r) => {
      if (r.trailingSlash) throw new ConfinedError('ENOENT', `${guestPath}: trailing slash`);
      if (!leadsDownward(target)) {
        throw new ConfinedError('ENOTCAPABLE', `symlink target ${target} is absolute or climbs with ..`);
      }
      this.#entry(guestPath, Buffer.byteLength(target), () => symlinkSync(target, r.path));
    });
  }

  /** Renames `from` (in this directory) to `to` in `toDir`, which must lie in the same grant. */
  rename(from: string, toDir: ConfinedDir, to: string): void {
    this.#seen('remove', from, () => toDir.#seen('create', to, () => this.#rename(from, toDir, to)));
  }

  #rename(from: string, toDir: ConfinedDir, to: string): void {
    this.#writable(from);
    toDir.#writable(to);
    this.#sameGrant(toDir, from, to);
    this.at(from, { follow: false }, (a) =>
      toDir.at(to, { follow: false }, (b) => {
        if (a.name === '.' || b.name === '.')
          throw new ConfinedError('EINVAL', 'cannot rename a directory itself');
        if (a.trailingSlash || b.trailingSlash) {
          // POSIX: a trailing slash is allowed only when the source is a directory.
          if (!lstatSync(a.path).isDirectory())
            throw new ConfinedError('ENOTDIR', `${from}: not a directory`);
        }
        renameSync(a.path, b.path);
      }),
    );
  }

  /**
   * Hard-links `from` (in this directory; its last symlink followed only with `follow`) to `to` in
   * `toDir`, which must lie in the same grant: a link from one grant into another would give a file
   * the person granted read-only (or granted for another folder) a second name where the guest, or
   * any host program, writes. Within one rw grant a link stays allowed: both names lie in the folder
   * granted for writing, and the new file has two links, so it is never opened for writing again.
   */
  link(from: string, options: WalkOptions, toDir: ConfinedDir, to: string): void {
    toDir.#seen('create', to, () => this.#link(from, options, toDir, to));
  }

  #link(from: string, options: WalkOptions, toDir: ConfinedDir, to: string): void {
    toDir.#writable(to);
    this.#sameGrant(toDir, from, to);
    this.at(from, options, (a) =>
      toDir.at(to, { follow: false }, (b) => {
        if (a.trailingSlash || b.trailingSlash) throw new ConfinedError('ENOENT', 'trailing slash');
        this.#entry(to, 0, () => linkSync(a.path, b.path));
      }),
    );
  }

  /**
   * Sets access and/or modification times without following the final component (see setTimes).
   * Not on a file with more than one hard link (its other names may lie outside).
   */
  utimes(guestPath: string, options: WalkOptions, times: FileTimes): void {
    this.#writable(guestPath);
    this.at(guestPath, options, (r) => {
      const st = lstatSync(r.path);
      if (st.isFile() && st.nlink > 1) {
        throw new ConfinedError('ENOTCAPABLE', `${guestPath} has ${st.nlink} hard links: times not set`);
      }
      setTimes(`/proc/${process.pid}/fd/${r.dirFd}/${r.name}`, times, true);
    });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    closeSync(this.fd);
  }

  /** Makes a new entry through the write cap (none: no cap, e.g. a directory opened without one). */
  #entry<T>(guestPath: string, extra: number, make: () => T): T {
    return this.#writes === undefined ? make() : this.#writes.entry(guestPath, extra, make);
  }

  #live(): void {
    if (this.#closed) throw new ConfinedError('EINVAL', 'the directory was closed');
  }

  /** EXDEV when `other` lies in another grant (each grant is a device of its own to the guest). */
  #sameGrant(other: ConfinedDir, from: string, to: string): void {
    if (other.#grant !== this.#grant) {
      throw new ConfinedError('EXDEV', `${from} -> ${to}: renames and links stay within one grant`);
    }
  }

  #writable(guestPath: string): void {
    if (this.readOnly) throw new ConfinedError('EROFS', `${guestPath}: read-only`);
  }

  /** The after-open check: the opened file's real path must be this directory or beneath it. */
  #checkInside(fd: number, guestPath: string): void {
    const base = this.hostPath();
    const at = readlinkSync(fdPath(fd));
    if (at !== base && !at.startsWith(base === '/' ? '/' : `${base}/`)) {
      throw new ConfinedError('ENOTCAPABLE', `${guestPath} resolved outside the directory`);
    }
  }

  /**
   * The walk. `opened` collects fds it opened (the caller closes them). Directories are opened one
   * name at a time relative to the previous fd with O_NOFOLLOW; `..` pops back to the fd it came
   * from (never above this directory); a symlink's target is spliced into the remaining components.
   */
  #walk(guestPath: string, follow: boolean, opened: number[]): Resolved {
    if (guestPath === '') throw new ConfinedError('ENOENT', 'empty path');
    if (guestPath.startsWith('/')) throw new ConfinedError('ENOTCAPABLE', `absolute path ${guestPath}`);
    if (guestPath.includes('\0')) throw new ConfinedError('EINVAL', 'path holds a NUL byte');
    const stack: number[] = [this.fd];
    let trailingSlash = guestPath.endsWith('/');
    let queue = guestPath.split('/').filter((p) => p !== '');
    let hops = 0;
    const top = (): number => stack[stack.length - 1] as number;
    const done = (name: string): Resolved => ({
      dirFd: top(),
      name,
      path: fdPath(top(), name),
      trailingSlash,
    });
    if (queue.length === 0) return done('.');
    while (queue.length > 0) {
      const name = queue.shift() as string;
      const last = queue.length === 0;
      if (name === '.') {
        if (last) return done('.');
        continue;
      }
      if (name === '..') {
        if (stack.length === 1)
          throw new ConfinedError('ENOTCAPABLE', `${guestPath} leads above the directory`);
        stack.pop();
        if (last) return done('.');
        continue;
      }
      if (this.#hidden(name)) {
        throw new ConfinedError('ENOENT', `${guestPath}: no such file or directory`);
      }
      if (last && !follow && !trailingSlash) return done(name);
      let st;
      try {
        st = lstatSync(fdPath(top(), name));
      } catch (err) {
        if (last && code(err) === 'ENOENT') return done(name);
        throw err;
      }
      if (st.isSymbolicLink()) {
        if (++hops > MAX_SYMLINK_HOPS) throw new ConfinedError('ELOOP', `${guestPath}: too many symlinks`);
        const target = readlinkSync(fdPath(top(), name));
        if (target.startsWith('/')) {
          throw new ConfinedError('ENOTCAPABLE', `${guestPath}: symlink ${name} leads to an absolute path`);
        }
        if (target === '') throw new ConfinedError('ENOENT', `${guestPath}: empty symlink`);
        // The link's trailing slash (and the path's own, when the link was last) carries over.
        if (last) trailingSlash = trailingSlash || target.endsWith('/');
        queue = [...target.split('/').filter((p) => p !== ''), ...queue];
        if (queue.length === 0) return done('.');
        continue;
      }
      if (last) return done(name);
      if (!st.isDirectory()) throw new ConfinedError('ENOTDIR', `${guestPath}: ${name} is not a directory`);
      let fd: number;
      try {
        fd = openSync(fdPath(top(), name), O_PATH | O_DIRECTORY | O_NOFOLLOW);
      } catch (err) {
        // Swapped for a symlink (or a file) since the lstat: never followed.
        if (code(err) === 'ELOOP' || code(err) === 'ENOTDIR') {
          throw new ConfinedError('ENOTCAPABLE', `${guestPath}: ${name} changed while being resolved`);
        }
        throw err;
      }
      opened.push(fd);
      stack.push(fd);
    }
    return done('.');
  }
}

/**
 * For fd-level changes that are not writes (set-times on a file opened to read): refuses a regular
 * file with more than one hard link, as openFile does for writing.
 */
export function assertSingleLink(fd: number): void {
  const st = fstatSync(fd);
  if (st.isFile() && st.nlink > 1) {
    throw new ConfinedError('ENOTCAPABLE', `the file has ${st.nlink} hard links: not changed`);
  }
}

/**
 * O_TRUNC after the fact, on the open file: ftruncate where the fd may write, else (O_RDONLY|O_TRUNC,
 * which Linux honours) a write-only reopen of the same open file through its /proc link.
 */
function truncateOpened(fd: number, flags: number): void {
  if ((flags & (O_WRONLY | O_RDWR)) !== 0) {
    ftruncateSync(fd, 0);
    return;
  }
  closeSync(openSync(fdPath(fd), O_WRONLY | O_TRUNC | O_NONBLOCK));
}

/**
 * The rule for symlinks a guest makes: relative, non-empty, no `..` component. A link whose target
 * only descends from its own folder stays beneath that folder, and so does any chain of such links,
 * wherever the guest later moves them; a `..` that is inside when made (`sub/up -> ..`) can be taken
 * out by a second link through it (`x -> sub/up/..`) or by moving the folder that holds it.
 */
export function leadsDownward(target: string): boolean {
  if (target === '' || target.startsWith('/')) return false;
  return target.split('/').every((part) => part !== '..');
}

/** New times in nanoseconds since the epoch; `now` for the current time, absent to leave one as is. */
export interface FileTimes {
  atime?: bigint | 'now' | undefined;
  mtime?: bigint | 'now' | undefined;
}

const TOUCH = ['/usr/bin/touch', '/bin/touch'].find((p) => existsSync(p));

/**
 * Sets file times to the nanosecond. Node's utimes takes seconds as a double and libuv keeps only
 * microseconds (and cannot leave one time unchanged), so preview1's exact times go through
 * coreutils' touch (utimensat with UTIME_OMIT), run without environment on a /proc path of this
 * process; `noDeref` (-h) never follows a symlink there.
 */
export function setTimes(procPath: string, times: FileTimes, noDeref: boolean): void {
  if (TOUCH === undefined) throw new ConfinedError('EINVAL', 'setting file times needs touch(1)');
  const spec = (t: bigint): string => `@${t / 1_000_000_000n}.${String(t % 1_000_000_000n).padStart(9, '0')}`;
  const run = (which: string[], t: bigint | 'now'): void => {
    const args = [
      ...which,
      ...(noDeref ? ['-h'] : []),
      ...(t === 'now' ? [] : ['-d', spec(t)]),
      '--',
      procPath,
    ];
    try {
      execFileSync(TOUCH, args, { env: {}, stdio: 'ignore' });
    } catch {
      throw new ConfinedError('EACCES', 'cannot set the file times');
    }
  };
  const { atime, mtime } = times;
  if (atime !== undefined && atime === mtime) run(['-a', '-m'], atime);
  else {
    if (atime !== undefined) run(['-a'], atime);
    if (mtime !== undefined) run(['-m'], mtime);
  }
}
