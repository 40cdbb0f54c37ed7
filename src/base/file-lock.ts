import * as fs from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CapsuleError } from './errors.js';

export interface FileLockOptions {
  /** Give up after this long (default 10 s). */
  timeoutMs?: number;
  /**
   * A lock whose mtime is older than this is a crashed holder's and is broken (default 5 s, at
   * least 2 s). A live holder refreshes its lock's mtime every half of this, so it never goes stale.
   */
  staleMs?: number;
}

/**
 * Cross-process mutual exclusion for every read-modify-write of capsule.json and every audit append,
 * in one process or several: proper-lockfile's lock (an atomic mkdir, its mtime kept fresh while
 * held, so a crashed holder's lock goes stale and a live one's never does).
 *
 * Breaking a stale lock is the one part done here: proper-lockfile judges staleness and then removes
 * the lock, and a second breaker that judged the same stale lock can remove the fresh lock the first
 * breaker made in between — two holders, and the audit chain forks. Here the removal happens only
 * under a short second lock (`<lock>.break`), after judging staleness again under it.
 */
export async function withFileLock<T>(
  lockPath: string,
  fn: () => Promise<T>,
  options: FileLockOptions = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const staleMs = Math.max(options.staleMs ?? 5_000, 2_000);
  await mkdir(path.dirname(lockPath), { recursive: true });
  const { lock } = await import('proper-lockfile');
  const state = { held: false, lost: undefined as Error | undefined };
  const lockOptions = {
    lockfilePath: lockPath,
    realpath: false,
    stale: staleMs,
    retries: 0,
    fs: breakingFs(lockPath, staleMs, state),
    onCompromised: (err: Error) => {
      state.lost = err;
    },
  };
  const deadline = Date.now() + timeoutMs;
  let delay = 2;
  let release: () => Promise<void>;
  for (;;) {
    try {
      release = await lock(lockPath, lockOptions);
      state.held = true;
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ELOCKED') throw err;
    }
    if (Date.now() > deadline) {
      throw new CapsuleError('LOCK_TIMEOUT', `Timed out waiting for the lock ${lockPath}.`, {
        file: lockPath,
        hint: 'Another capsule process holds it; if none is running, delete the lock.',
      });
    }
    await sleep(delay + Math.random() * delay);
    delay = Math.min(delay * 2, 50);
  }
  try {
    const result = await fn();
    if (state.lost !== undefined) {
      throw new CapsuleError(
        'LOCK_TIMEOUT',
        `Lost the lock ${lockPath} while holding it (this process stalled past ${staleMs} ms).`,
        { file: lockPath, hint: 'Run the command again.' },
        { cause: state.lost },
      );
    }
    return result;
  } finally {
    await release().catch(() => undefined);
    state.held = false;
  }
}

type Callback = (err: NodeJS.ErrnoException | null) => void;

/**
 * node:fs for proper-lockfile, with its one removal of another's lock (`rmdir` of a lock we do not
 * hold: it judged the lock stale) replaced by the serialized break. The break runs synchronously, so
 * no other lock call of this process interleaves with it.
 */
function breakingFs(lockPath: string, staleMs: number, state: { held: boolean }): typeof fs {
  return {
    ...fs,
    // proper-lockfile calls rmdir(path, callback) only.
    rmdir(p: string, cb: Callback): void {
      if (state.held || p !== lockPath) {
        fs.rm(p, { recursive: true, force: true }, cb);
        return;
      }
      try {
        breakIfStale(lockPath, staleMs);
        cb(null);
      } catch (err) {
        cb(err as NodeJS.ErrnoException);
      }
    },
  } as typeof fs;
}

function isStale(file: string, staleMs: number): boolean {
  try {
    return fs.statSync(file).mtimeMs < Date.now() - staleMs;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

function breakIfStale(lockPath: string, staleMs: number): void {
  const breaker = `${lockPath}.break`;
  try {
    fs.mkdirSync(breaker);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    // Another breaker is at it (it holds this for microseconds). One killed in between leaves it
    // behind: once that is stale too, remove it; the caller tries again either way.
    if (isStale(breaker, staleMs)) fs.rmSync(breaker, { recursive: true, force: true });
    return;
  }
  try {
    // Judged again under the break lock: the stale lock may have been broken and retaken meanwhile.
    // A lock file of an earlier capsule (a file, not a folder) is removed the same way.
    if (isStale(lockPath, staleMs)) fs.rmSync(lockPath, { recursive: true, force: true });
  } finally {
    fs.rmdirSync(breaker);
  }
}
