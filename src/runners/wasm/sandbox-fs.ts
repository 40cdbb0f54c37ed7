import { copyFile, lstat, mkdir, mkdtemp, readdir, rename, rm, rmdir, unlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { CapsuleError } from '../../errors.js';
import type { GuestPreopen } from './protocol.js';
import { isReservedName } from '../../permissions/protected-state.js';

/** A directory the guest may see: a granted host directory and where it appears in the guest. */
export interface DirGrant {
  /** Real host path of the granted directory. */
  hostPath: string;
  /** Absolute guest path, e.g. `/data`. */
  guestPath: string;
  mode: 'ro' | 'rw';
}

export interface PreparedPreopens {
  preopens: GuestPreopen[];
  /** Writes what the guest changed in rw copies back to the granted host directories. */
  commit(): Promise<void>;
  /** Removes the disposable copies. Safe to call twice. */
  dispose(): Promise<void>;
}

/** Guest path for a manifest grant: `/` + the declared project-relative path, normalized. */
export function guestPathFor(declared: string): string {
  const p = path.posix.normalize(`/${declared}`).replace(/\/+$/, '');
  return p === '' ? '/' : p;
}

interface FileStamp {
  size: number;
  mtimeMs: number;
}

interface Copied {
  grant: DirGrant;
  copy: string;
  /** Relative path → stamp of the copy right after copying (to spot what the guest changed). */
  files: Map<string, FileStamp>;
  dirs: Set<string>;
}

const EMPTY: PreparedPreopens = { preopens: [], commit: async () => {}, dispose: async () => {} };

/**
 * node:wasi follows directory symlinks out of a preopen and cannot make a preopen read-only, so the
 * guest never sees a granted directory itself: it gets a disposable copy holding only regular files
 * and directories (symlinks, devices and sockets are left out, so a planted link leads nowhere).
 * A ro copy is thrown away; a rw copy's changes are written back by `commit()` without following
 * any host symlink.
 */
export async function preparePreopens(
  grants: readonly DirGrant[],
  options: { scratchDir?: string | undefined; maxCopyBytes: number },
): Promise<PreparedPreopens> {
  if (grants.length === 0) return EMPTY;
  const scratch = await mkdtemp(path.join(options.scratchDir ?? os.tmpdir(), 'capsule-wasm-'));
  const copies: Copied[] = [];
  let budget = options.maxCopyBytes;
  try {
    for (const [i, grant] of grants.entries()) {
      // lstat: hostPath is a real path; a symlink there now was swapped in since loading.
      const st = await lstat(grant.hostPath).catch(() => undefined);
      if (st === undefined || !st.isDirectory()) {
        throw new CapsuleError('UNSUPPORTED', `wasm fs grant ${grant.hostPath} is not a directory`, {
          hint: 'Wasm capabilities are given directories (WASI preopens); grant the folder that holds the file.',
        });
      }
      const copy = path.join(scratch, String(i));
      const entry: Copied = { grant, copy, files: new Map(), dirs: new Set(['']) };
      await mkdir(copy);
      budget = await copyTree(grant.hostPath, copy, '', entry, budget, options.maxCopyBytes);
      copies.push(entry);
    }
  } catch (err) {
    await rm(scratch, { recursive: true, force: true });
    throw err;
  }
  let disposed = false;
  return {
    preopens: copies.map((c) => ({
      guest: c.grant.guestPath,
      host: c.copy,
      readOnly: c.grant.mode === 'ro',
    })),
    commit: async () => {
      for (const c of copies) if (c.grant.mode === 'rw') await commitTree(c);
    },
    dispose: async () => {
      if (disposed) return;
      disposed = true;
      await rm(scratch, { recursive: true, force: true });
    },
  };
}

async function copyTree(
  from: string,
  to: string,
  rel: string,
  entry: Copied,
  budget: number,
  max: number,
): Promise<number> {
  let left = budget;
  for (const d of await readdir(from, { withFileTypes: true })) {
    const src = path.join(from, d.name);
    const dst = path.join(to, d.name);
    const r = rel === '' ? d.name : `${rel}/${d.name}`;
    // capsule's own state (a nested capsule.json or .capsule/) is never shown to a guest.
    if (isReservedName(d.name)) continue;
    if (d.isDirectory()) {
      await mkdir(dst);
      entry.dirs.add(r);
      left = await copyTree(src, dst, r, entry, left, max);
    } else if (d.isFile()) {
      const st = await lstat(src);
      left -= st.size;
      if (left < 0) {
        throw new CapsuleError(
          'UNSUPPORTED',
          `wasm fs grant ${entry.grant.hostPath} holds more than ${max} bytes`,
          {
            hint: 'Grant a smaller directory: the Wasm sandbox gives the guest a disposable copy of each grant.',
          },
        );
      }
      await copyFile(src, dst);
      const after = await lstat(dst);
      entry.files.set(r, { size: after.size, mtimeMs: after.mtimeMs });
    }
    // Symlinks and special files are not copied: nothing in the copy points out of it.
  }
  return left;
}

/** Walks a rw copy and mirrors the guest's changes onto the host, never through a host symlink. */
async function commitTree(c: Copied): Promise<void> {
  const seenFiles = new Set<string>();
  const seenDirs = new Set<string>();
  const walk = async (rel: string): Promise<void> => {
    const hostDir = rel === '' ? c.grant.hostPath : path.join(c.grant.hostPath, rel);
    const hst = await lstat(hostDir).catch(() => undefined);
    if (hst === undefined) await mkdir(hostDir);
    else if (!hst.isDirectory()) return; // a host symlink or file: never write through it
    seenDirs.add(rel);
    for (const d of await readdir(path.join(c.copy, rel), { withFileTypes: true })) {
      const r = rel === '' ? d.name : `${rel}/${d.name}`;
      // Nor can a guest plant one: a capsule.json or .capsule/ it creates is not written back.
      if (isReservedName(d.name)) continue;
      if (d.isDirectory()) await walk(r);
      else if (d.isFile()) {
        seenFiles.add(r);
        const st = await lstat(path.join(c.copy, r));
        const before = c.files.get(r);
        if (before !== undefined && before.size === st.size && before.mtimeMs === st.mtimeMs) continue;
        const target = path.join(c.grant.hostPath, r);
        const tst = await lstat(target).catch(() => undefined);
        if (tst !== undefined && tst.isDirectory()) continue;
        // temp + rename: the host never sees a half-written file, and rename replaces a link, not its target.
        const tmp = path.join(path.dirname(target), `.capsule-${randomBytes(6).toString('hex')}.tmp`);
        await copyFile(path.join(c.copy, r), tmp);
        await rename(tmp, target);
      }
    }
  };
  await walk('');
  // Deleting goes only through host directories that are real directories, checked component by component.
  const realDirs = async (rel: string): Promise<boolean> => {
    let cur = c.grant.hostPath;
    for (const part of rel === '' ? [] : rel.split('/')) {
      cur = path.join(cur, part);
      const st = await lstat(cur).catch(() => undefined);
      if (st === undefined || !st.isDirectory()) return false;
    }
    return true;
  };
  for (const r of c.files.keys()) {
    if (seenFiles.has(r)) continue;
    const parent = r.includes('/') ? r.slice(0, r.lastIndexOf('/')) : '';
    if (!(await realDirs(parent))) continue;
    const target = path.join(c.grant.hostPath, r);
    const st = await lstat(target).catch(() => undefined);
    if (st?.isFile() === true) await unlink(target);
  }
  const gone = [...c.dirs].filter((d) => d !== '' && !seenDirs.has(d)).sort((a, b) => b.length - a.length);
  for (const r of gone) {
    if (await realDirs(r)) await rmdir(path.join(c.grant.hostPath, r)).catch(() => undefined);
  }
}
