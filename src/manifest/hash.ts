import { createHash } from 'node:crypto';
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readFile as readFileCallback,
  readFileSync,
  readdirSync,
  realpathSync,
} from 'node:fs';
import { promisify } from 'node:util';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';
import { isInside } from './paths.js';
import type { Manifest } from './schema.js';

const MAX_FILES = 2000;
const MAX_TOTAL_BYTES = 128 * 1024 * 1024;

/** The checks file of a capability (see src/cases): data for capsule, not code for the runner. */
export const CHECKS_FILE = 'cases.json';

export interface FolderWalk {
  /** Relative paths (forward slashes) of every regular file, sorted. */
  files: string[];
  /** Problems: symlinks leaving the folder, too many files, unreadable entries. */
  problems: Array<{ file: string; message: string }>;
}

const readFd = promisify(readFileCallback);

/**
 * Files up to this size are read synchronously: microseconds each, where a trip through the thread pool
 * per open, stat, read and close costs more, on every call (the executor reads and hashes the folder it
 * runs). Larger files are read without holding the thread.
 */
const SYNC_READ_BYTES = 1024 * 1024;

/**
 * Walk a capability folder; symlinks must resolve inside it (they are not followed for listing). The
 * listing is synchronous (a folder of at most MAX_FILES entries, cached lookups).
 */
export async function walkFolder(dir: string): Promise<FolderWalk> {
  const files: string[] = [];
  const problems: FolderWalk['problems'] = [];
  const stack: string[] = [''];
  while (stack.length > 0) {
    const rel = stack.pop() as string;
    let entries;
    try {
      entries = readdirSync(path.join(dir, rel), { withFileTypes: true });
    } catch (err) {
      problems.push({
        file: rel || '.',
        message: `cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
      });
      continue;
    }
    for (const entry of entries) {
      const childRel = rel === '' ? entry.name : `${rel}/${entry.name}`;
      const abs = path.join(dir, childRel);
      if (entry.isSymbolicLink()) {
        try {
          const target = realpathSync.native(abs);
          if (!isInside(dir, target)) {
            problems.push({
              file: childRel,
              message: `is a symlink that leaves the capability folder (to ${target})`,
            });
            continue;
          }
          const st = lstatSync(target);
          if (st.isFile()) files.push(childRel);
        } catch {
          problems.push({ file: childRel, message: 'is a dangling symlink' });
        }
      } else if (entry.isDirectory()) {
        stack.push(childRel);
      } else if (entry.isFile()) {
        files.push(childRel);
      }
      if (files.length > MAX_FILES) {
        problems.push({ file: '.', message: `holds more than ${MAX_FILES} files` });
        return { files, problems };
      }
    }
  }
  files.sort();
  return { files, problems };
}

/**
 * The files of a folder that make up the capability: everything the runner is given, so everything
 * its code can reach. The one exception is a top-level cases.json the manifest does not name (as
 * entry, source or an argument): it holds checks, is left out of the content hash (editing a test
 * does not revoke grants) and, because it is not hashed, it is not staged either, so the code never
 * sees it at run time. Named by the manifest, it is code like any other file and is hashed.
 */
export function contentFiles(files: readonly string[], manifest: Manifest): string[] {
  const named = [manifest.entry, manifest.source, ...manifest.args]
    .filter((p): p is string => p !== undefined)
    .map((p) => path.posix.normalize(p.replaceAll('\\', '/')));
  if (named.includes(CHECKS_FILE)) return [...files];
  return files.filter((f) => f !== CHECKS_FILE);
}

/** One file of a snapshot: its bytes as they were read (and hashed), and whether it was executable. */
export interface SnapshotFile {
  path: string;
  bytes: Buffer;
  executable: boolean;
}

export interface ContentSnapshot {
  files: SnapshotFile[];
  /** The content hash of exactly these bytes. */
  contentHash: string;
}

/**
 * Read `files` of `dir` once and hash the bytes that were read: what is hashed is what a caller
 * may then write elsewhere (the executor's stage). Only regular files are read (a FIFO or device
 * swapped in is refused without blocking); a symlink is read through, like the walk lists it.
 */
export function snapshotFiles(dir: string, files: readonly string[]): Promise<ContentSnapshot> {
  return readAndHash(dir, files, true);
}

async function readAndHash(dir: string, files: readonly string[], keep: boolean): Promise<ContentSnapshot> {
  const hash = createHash('sha256');
  const out: SnapshotFile[] = [];
  let total = 0;
  for (const rel of files) {
    const fd = openSync(path.join(dir, rel), constants.O_RDONLY | constants.O_NONBLOCK);
    let bytes: Buffer;
    let mode: number;
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) {
        throw new CapsuleError('MANIFEST_INVALID', `${rel} is not a regular file`, {
          file: path.join(dir, rel),
          hint: 'A capability folder holds regular files (and folders) only.',
        });
      }
      total += st.size;
      if (total > MAX_TOTAL_BYTES) {
        throw new CapsuleError(
          'MANIFEST_INVALID',
          `capability folder is larger than ${MAX_TOTAL_BYTES} bytes`,
          {
            file: dir,
            hint: 'Keep large data out of the capability folder.',
          },
        );
      }
      bytes = st.size <= SYNC_READ_BYTES ? readFileSync(fd) : await readFd(fd);
      mode = st.mode;
    } finally {
      closeSync(fd);
    }
    hash.update(`${rel}\0${bytes.length}\0`);
    hash.update(bytes);
    if (keep) out.push({ path: rel, bytes, executable: (mode & 0o111) !== 0 });
  }
  return { files: out, contentHash: `sha256:${hash.digest('hex')}` };
}

/**
 * Content hash of a capability: every file's relative path and bytes, in sorted order.
 * The manifest is one of the files, so an environment change changes the hash too.
 */
export async function hashFiles(dir: string, files: readonly string[]): Promise<string> {
  // Bytes are not kept: a registry scan hashes many folders at once.
  return (await readAndHash(dir, files, false)).contentHash;
}
