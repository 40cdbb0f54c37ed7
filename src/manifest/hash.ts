import { createHash } from 'node:crypto';
import { lstat, readdir, readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { isInside } from './paths.js';

const MAX_FILES = 2000;
const MAX_TOTAL_BYTES = 128 * 1024 * 1024;

export interface FolderWalk {
  /** Relative paths (forward slashes) of every regular file, sorted. */
  files: string[];
  /** Problems: symlinks leaving the folder, too many files, unreadable entries. */
  problems: Array<{ file: string; message: string }>;
}

/** Walk a capability folder; symlinks must resolve inside it (they are not followed for listing). */
export async function walkFolder(dir: string): Promise<FolderWalk> {
  const files: string[] = [];
  const problems: FolderWalk['problems'] = [];
  const stack: string[] = [''];
  while (stack.length > 0) {
    const rel = stack.pop() as string;
    let entries;
    try {
      entries = await readdir(path.join(dir, rel), { withFileTypes: true });
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
          const target = await realpath(abs);
          if (!isInside(dir, target)) {
            problems.push({
              file: childRel,
              message: `is a symlink that leaves the capability folder (to ${target})`,
            });
            continue;
          }
          const st = await lstat(target);
          if (st.isFile()) files.push(childRel);
        } catch {
          problems.push({ file: childRel, message: 'is a dangling symlink' });
        }
      } else if (entry.isDirectory()) {
        stack.push(childRel);
      } else if (entry.isFile()) {
        // cases.json holds checks, not code: editing a test must not revoke the capability's grants.
        if (childRel !== 'cases.json') files.push(childRel);
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
 * Content hash of a capability: every file's relative path and bytes, in sorted order.
 * The manifest is one of the files, so an environment change changes the hash too.
 */
export async function hashFiles(dir: string, files: readonly string[]): Promise<string> {
  const hash = createHash('sha256');
  let total = 0;
  for (const rel of files) {
    const bytes = await readFile(path.join(dir, rel));
    total += bytes.length;
    if (total > MAX_TOTAL_BYTES) throw new Error(`capability folder is larger than ${MAX_TOTAL_BYTES} bytes`);
    hash.update(`${rel}\0${bytes.length}\0`);
    hash.update(bytes);
  }
  return `sha256:${hash.digest('hex')}`;
}
