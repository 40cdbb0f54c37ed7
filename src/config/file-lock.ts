import { mkdir, open, readFile, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CapsuleError } from '../errors.js';

export interface FileLockOptions {
  /** Give up after this long (default 10 s). */
  timeoutMs?: number;
  /** A lock older than this, or held by a dead process on this host, is broken (default 30 s). */
  staleMs?: number;
}

/**
 * Cross-process mutual exclusion by an O_EXCL lock file holding `{pid, at}`. Used for every
 * read-modify-write of capsule.json and every audit append, in one process or several.
 * A crashed holder's lock is broken when its pid is gone or it is older than `staleMs`.
 */
export async function withFileLock<T>(
  lockPath: string,
  fn: () => Promise<T>,
  options: FileLockOptions = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const staleMs = options.staleMs ?? 30_000;
  await mkdir(path.dirname(lockPath), { recursive: true });
  const deadline = Date.now() + timeoutMs;
  let delay = 2;
  for (;;) {
    try {
      const handle = await open(lockPath, 'wx', 0o600);
      try {
        await handle.writeFile(JSON.stringify({ pid: process.pid, at: Date.now() }));
      } finally {
        await handle.close();
      }
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    if (await isStale(lockPath, staleMs)) {
      await unlink(lockPath).catch(() => undefined);
      continue;
    }
    if (Date.now() > deadline) {
      throw new CapsuleError('LOCK_TIMEOUT', `Timed out waiting for the lock ${lockPath}.`, {
        file: lockPath,
        hint: 'Another capsule process holds it; if none is running, delete the lock file.',
      });
    }
    await sleep(delay + Math.random() * delay);
    delay = Math.min(delay * 2, 50);
  }
  try {
    return await fn();
  } finally {
    await unlink(lockPath).catch(() => undefined);
  }
}

/**
 * A holder writes its pid right after creating the lock; an empty or unreadable lock older than this
 * was left by a holder killed in between.
 */
const HALF_WRITTEN_MS = 1000;

async function isStale(lockPath: string, staleMs: number): Promise<boolean> {
  try {
    const [text, st] = await Promise.all([readFile(lockPath, 'utf8'), stat(lockPath)]);
    const age = Date.now() - st.mtimeMs;
    if (age > staleMs) return true;
    let pid: unknown;
    try {
      pid = (JSON.parse(text) as { pid?: unknown }).pid;
    } catch {
      return age > HALF_WRITTEN_MS;
    }
    if (typeof pid !== 'number' || pid === process.pid) return false;
    try {
      process.kill(pid, 0);
      return false;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ESRCH';
    }
  } catch {
    // Gone (released meanwhile) or unreadable: not stale.
    return false;
  }
}
