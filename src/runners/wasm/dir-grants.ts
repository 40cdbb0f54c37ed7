import { lstat } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../../base/errors.js';

/** A directory the guest may see: a granted host directory and where it appears in the guest. */
export interface DirGrant {
  /** Real host path of the granted directory. */
  hostPath: string;
  /** Absolute guest path, e.g. `/data`. */
  guestPath: string;
  mode: 'ro' | 'rw';
}

/** Guest path for a manifest grant: `/` + the declared project-relative path, normalized. */
export function guestPathFor(declared: string): string {
  const p = path.posix.normalize(`/${declared}`).replace(/\/+$/, '');
  return p === '' ? '/' : p;
}

/**
 * Right before a run: each grant must still be a real directory. `lstat`, because hostPath is a
 * canonical path: a symlink there now was swapped in since loading (the worker opens it with
 * O_NOFOLLOW as well, so a swap after this check fails the run instead of being followed).
 */
export async function assertDirGrants(grants: readonly DirGrant[]): Promise<void> {
  for (const grant of grants) {
    const st = await lstat(grant.hostPath).catch(() => undefined);
    if (st === undefined || !st.isDirectory()) {
      throw new CapsuleError('UNSUPPORTED', `wasm fs grant ${grant.hostPath} is not a directory`, {
        hint: 'Wasm capabilities are given directories (WASI preopens); grant the folder that holds the file.',
      });
    }
  }
}
