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
