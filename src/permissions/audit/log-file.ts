/**
 * The log file itself: durable appends, reading its tail and ranges, and ownership when root writes into
 * someone else's project.
 */
import {
  closeSync,
  constants,
  fchownSync,
  fdatasync as fdatasyncCallback,
  fstatSync,
  openSync,
  statSync,
  writeSync,
} from 'node:fs';
import { mkdir, open } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { GENESIS_HASH, checkLine } from './record.js';

const fdatasync = promisify(fdatasyncCallback);

/** Append, create if missing, and never through a symlink planted where the log should be. */
const APPEND_FLAGS = constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW;

/**
 * Append `bytes` with one write (looping only on a short write) and fsync before returning: what
 * append() promises to its caller is on disk, not only in the page cache.
 */
export async function appendDurably(file: string, bytes: Buffer): Promise<void> {
  // The write into the page cache is synchronous (microseconds); the fsync, which waits for the
  // disk, goes through the thread pool so the process keeps serving (and queueing) meanwhile.
  const fd = openSync(file, APPEND_FLAGS, 0o600);
  try {
    if (process.geteuid?.() === 0) ownLikeFolder(fd, path.dirname(file));
    let done = 0;
    while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
    await fdatasync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Root writing into someone else's project (sudo, a container running as root): what it creates
 * there takes the owner of the folder it is in, so that person's own later calls can still append
 * to the log they share. Only root can, and only what root owns and is reachable by this one name
 * (one link, never through a symlink: the fd was opened O_NOFOLLOW) is given away — never a file
 * linked in from elsewhere.
 */
function ownLikeFolder(fd: number, folder: string): void {
  const st = fstatSync(fd);
  const dir = statSync(folder);
  if (st.uid === 0 && dir.uid !== 0 && st.nlink === 1 && st.isFile()) fchownSync(fd, dir.uid, dir.gid);
}

/** The log's folder (`.capsule`), given the owner of the project when root made it. */
export async function makeLogDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  if (process.geteuid?.() !== 0) return;
  let fd: number;
  try {
    fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch {
    return; // not a plain folder (a symlink planted there): the append that follows says so
  }
  try {
    const st = fstatSync(fd);
    // A folder's link count is 2 + its subfolders: judge it as a folder, not by links.
    const parent = statSync(path.dirname(dir));
    if (st.uid === 0 && parent.uid !== 0) fchownSync(fd, parent.uid, parent.gid);
  } finally {
    closeSync(fd);
  }
}

export async function readRange(file: string, start: number, length: number): Promise<Buffer> {
  const handle = await open(file, 'r');
  try {
    const buf = Buffer.alloc(length);
    const { bytesRead } = await handle.read(buf, 0, length, start);
    return buf.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

export function uidText(): string {
  const uid = process.getuid?.();
  return uid !== undefined ? ` (uid ${uid})` : '';
}

interface Tail {
  /** seq + 1 of the last complete line (0 for an empty log), and its hash. */
  records: number;
  lastHash: string;
  /** Bytes after the last newline: a torn final line. */
  torn?: { offset: number; bytes: Buffer } | undefined;
  /** The last complete line is not a valid record. */
  problem?: string | undefined;
  /** The writer its last complete record names. */
  writer?: string | undefined;
}

/** The last complete line of the log and any fragment after it, read from the end of the file. */
export async function readTail(file: string, size: number): Promise<Tail> {
  if (size === 0) return { records: 0, lastHash: GENESIS_HASH };
  const handle = await open(file, 'r');
  try {
    for (let chunk = 8192; ; chunk *= 4) {
      const start = Math.max(0, size - chunk);
      const buf = Buffer.alloc(size - start);
      const { bytesRead } = await handle.read(buf, 0, buf.length, start);
      if (bytesRead !== buf.length)
        return { records: 0, lastHash: GENESIS_HASH, problem: 'it changed while it was being read' };
      const lastNl = buf.lastIndexOf(0x0a);
      const torn =
        lastNl === buf.length - 1
          ? undefined
          : { offset: start + lastNl + 1, bytes: Buffer.from(buf.subarray(lastNl + 1)) };
      if (lastNl < 0 && start > 0) continue; // no newline in this chunk yet: read more
      if (lastNl < 0) return { records: 0, lastHash: GENESIS_HASH, torn };
      const prevNl = lastNl > 0 ? buf.lastIndexOf(0x0a, lastNl - 1) : -1;
      if (prevNl < 0 && start > 0) continue; // the line may begin further back
      const lineStart = prevNl + 1;
      const checked = checkLine(buf.subarray(lineStart, lastNl));
      if (!checked.ok)
        return { records: 0, lastHash: GENESIS_HASH, torn, problem: `its last line ${checked.problem}` };
      return {
        records: checked.record.seq + 1,
        lastHash: checked.record.hash,
        torn,
        writer: checked.record.writer,
      };
    }
  } finally {
    await handle.close();
  }
}

export function fileSize(file: string): number {
  try {
    return statSync(file).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw err;
  }
}
