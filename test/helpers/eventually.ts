import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';

/**
 * Poll `probe` until it returns a truthy value (an effect: a file exists, a process is gone) and return it.
 * The bound only ends a test that would otherwise hang; it is not what the test judges.
 */
export async function eventually<T>(
  probe: () => T | Promise<T>,
  what: string,
  options: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<NonNullable<T>> {
  const { timeoutMs = 30_000, intervalMs = 25 } = options;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`still not true after ${timeoutMs} ms: ${what}`);
    await delay(intervalMs);
  }
}

/**
 * Whether `check` comes true within `ms` (polled, then checked once more at the bound), for tests that
 * assert on the answer: `expect(await holdsWithin(gone, 20_000)).toBe(true)`.
 */
export async function holdsWithin(
  check: () => boolean | Promise<boolean>,
  ms: number,
  intervalMs = 100,
): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await delay(intervalMs);
  }
  return check();
}

/**
 * `promise`, or a failure naming `what` if it has not settled within `ms`: for "it ends at all" checks (a
 * run that would never end by itself was stopped). A generous bound, not a measure of how fast it ended.
 */
export async function settlesWithin<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not settled after ${ms} ms: ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, bound]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Resolves once no file under `dir` has changed (ctime, which no writer can set back) for `ms`: for code
 * that trusts only settled files (the scan index remembers a folder only then). Waits on the files' own
 * stamps, so a slow write is waited out too.
 */
export async function settledFor(dir: string, ms: number): Promise<void> {
  const newest = (): number => {
    let at = 0;
    for (const entry of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
      at = Math.max(at, statSync(path.join(dir, entry)).ctimeMs);
    }
    return at;
  };
  await eventually(() => Date.now() - newest() > ms, `the files of ${dir} to settle for ${ms} ms`, {
    intervalMs: 100,
  });
}
