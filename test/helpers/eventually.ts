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
