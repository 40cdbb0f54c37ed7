import * as fs from 'node:fs';
import { rmdir } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
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
 * in one process or several: the lock is a folder made by an atomic mkdir, its mtime kept fresh while
 * held (every half of the stale threshold), so a crashed holder's lock goes stale and a live one's
 * never does. Taking and releasing are synchronous calls of microseconds: an audit append holds the
 * lock once per batch, and a trip through the thread pool for each step cost more than the append.
 *
 * A stale lock is removed only under a short second lock (`<lock>.break`), after judging staleness
 * again under it: two breakers that judged the same stale lock can otherwise remove the fresh lock
 * the first one made in between — two holders, and the audit chain forks.
 *
 * The folder is a lease; the kernel's half (claimKernelHold) is what a stopped holder keeps: within a
 * network namespace nobody breaks the folder of a live holder, however long it was stopped. Across
 * namespaces only the lease holds, and a holder that stalled past the threshold (its lock broken and
 * taken by another) finds out at its next refresh or before it answers: its work is refused and the
 * other's lock is left alone.
 */
export async function withFileLock<T>(
  lockPath: string,
  fn: (lock: LockHold) => Promise<T>,
  options: FileLockOptions = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const staleMs = Math.max(options.staleMs ?? 5_000, 2_000);
  const deadline = Date.now() + timeoutMs;
  let delay = 2;
  let held: HeldLock | undefined;
  for (;;) {
    const kernel = await claimKernelHold(lockPath);
    if (kernel !== 'busy') {
      try {
        held = tryLock(lockPath, staleMs, kernel);
      } catch (err) {
        kernel?.close();
        throw err;
      }
      if (held !== undefined) break;
      kernel?.close();
    }
    if (Date.now() > deadline) {
      throw new CapsuleError('LOCK_TIMEOUT', `Timed out waiting for the lock ${lockPath}.`, {
        file: lockPath,
        hint: 'Another capsule process holds it (a stopped one keeps it: resume or end it); if none is running, delete the lock folder.',
      });
    }
    await sleep(delay + Math.random() * delay);
    delay = Math.min(delay * 2, 50);
  }
  let result: T;
  try {
    result = await fn(held);
  } finally {
    // Removed through the thread pool: whoever fn already answered goes on meanwhile.
    await held.releaseLater();
  }
  if (held.lost) throw held.lostError();
  return result;
}

/** The lock as its holder sees it. */
export interface LockHold {
  /**
   * Throws LOCK_TIMEOUT unless the lock is still this holder's now: what was done under it was done
   * alone, and may be answered for before the lock is released.
   */
  confirm(): void;
}

/** A lock this process made: its mtime is what we last set, or it is no longer ours. */
class HeldLock implements LockHold {
  lost = false;
  #mtimeMs: number;
  readonly #refresh: NodeJS.Timeout;

  constructor(
    private readonly lockPath: string,
    private readonly staleMs: number,
    private readonly kernel: Server | undefined,
  ) {
    // The mkdir just stamped it: only read what it set.
    this.#mtimeMs = fs.statSync(lockPath).mtimeMs;
    this.#refresh = setInterval(() => this.keepFresh(), Math.floor(staleMs / 2));
    this.#refresh.unref();
    // A process that exits while holding (a signal's handler, process.exit) leaves no lock for others
    // to wait out.
    process.once('exit', this.#atExit);
  }

  readonly #atExit = (): void => this.release();

  private touch(): number {
    const now = new Date();
    fs.utimesSync(this.lockPath, now, now);
    return fs.statSync(this.lockPath).mtimeMs;
  }

  /** Still ours (the folder we made, with the mtime we set)? */
  private ours(): boolean {
    try {
      return fs.statSync(this.lockPath).mtimeMs === this.#mtimeMs;
    } catch {
      return false;
    }
  }

  private keepFresh(): void {
    if (this.lost) return;
    if (!this.ours()) {
      this.lost = true;
      clearInterval(this.#refresh);
      return;
    }
    try {
      this.#mtimeMs = this.touch();
    } catch {
      this.lost = true;
    }
  }

  lostError(): CapsuleError {
    return new CapsuleError(
      'LOCK_TIMEOUT',
      `Lost the lock ${this.lockPath} while holding it (this process stalled past ${this.staleMs} ms).`,
      { file: this.lockPath, hint: 'Run the command again.' },
    );
  }

  confirm(): void {
    if (!this.lost && !this.ours()) this.lost = true;
    if (this.lost) throw this.lostError();
  }

  /** Whether the folder is still ours to remove (stops keeping it fresh either way). */
  #letGo(): boolean {
    process.removeListener('exit', this.#atExit);
    clearInterval(this.#refresh);
    if (!this.lost && !this.ours()) this.lost = true;
    return !this.lost;
  }

  release(): void {
    try {
      if (this.#letGo()) fs.rmdirSync(this.lockPath);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    } finally {
      this.kernel?.close();
    }
  }

  async releaseLater(): Promise<void> {
    try {
      if (this.#letGo()) await rmdir(this.lockPath);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    } finally {
      // The folder first: whoever takes the kernel hold next finds no fresh folder to wait out.
      this.kernel?.close();
    }
  }
}

/**
 * The kernel's half of the lock: a listening socket in Linux's abstract namespace, named after the lock
 * folder's parent (device and inode) and the lock's name. The kernel lets one process bind a name at a
 * time and frees it only when that process closes it or dies — not when it is stopped. A holder stopped
 * past the stale threshold therefore still holds it, and no process that shares its network namespace
 * breaks the folder under it and writes meanwhile (a lease alone cannot fence a stopped holder: it wakes
 * and writes on what it read before). Processes in other network namespaces (a container sharing the
 * project folder) meet only at the folder. 'busy': another process holds the name; undefined: no such
 * namespace here (not Linux), and the folder alone decides.
 */
async function claimKernelHold(lockPath: string): Promise<Server | 'busy' | undefined> {
  const dir = path.dirname(lockPath);
  fs.mkdirSync(dir, { recursive: true });
  const st = fs.statSync(dir);
  const name = `\0capsule-lock:${st.dev}:${st.ino}:${path.basename(lockPath)}`.slice(0, 107);
  return new Promise((resolve) => {
    // Nothing is ever served: a connection is closed at once.
    const server = createServer((socket) => socket.destroy());
    server.once('error', (err: NodeJS.ErrnoException) =>
      resolve(err.code === 'EADDRINUSE' ? 'busy' : undefined),
    );
    server.listen(name, () => {
      server.unref();
      resolve(server);
    });
  });
}

/** The lock, taken now (its folder made), or undefined while another holds it (a stale one is broken). */
function tryLock(lockPath: string, staleMs: number, kernel: Server | undefined): HeldLock | undefined {
  try {
    fs.mkdirSync(lockPath);
  } catch (err) {
    // The folder's parent was made by claimKernelHold.
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    breakIfStale(lockPath, staleMs);
    return undefined;
  }
  try {
    return new HeldLock(lockPath, staleMs, kernel);
  } catch (err) {
    fs.rmSync(lockPath, { recursive: true, force: true });
    throw err;
  }
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
