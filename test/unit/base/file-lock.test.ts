import { existsSync } from 'node:fs';
import { mkdtemp, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { withFileLock } from '../../../src/base/file-lock.js';

describe('withFileLock', () => {
  it('breaks an empty lock left by a holder killed long ago (older than the stale threshold)', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-lock-'));
    const lock = path.join(dir, 'x.lock');
    await writeFile(lock, '');
    const old = new Date(Date.now() - 60_000);
    await utimes(lock, old, old);
    let ran = false;
    await withFileLock(lock, () => Promise.resolve((ran = true)), { timeoutMs: 3000 });
    expect(ran).toBe(true);
    expect(existsSync(lock)).toBe(false);
  });

  it('waits for a fresh lock held by a live process', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-lock-'));
    const lock = path.join(dir, 'x.lock');
    // The parent of this process is alive: its lock is not broken.
    await writeFile(lock, JSON.stringify({ pid: process.ppid, at: Date.now() }));
    await expect(withFileLock(lock, () => Promise.resolve(1), { timeoutMs: 300 })).rejects.toMatchObject({
      code: 'LOCK_TIMEOUT',
    });
    expect(existsSync(lock)).toBe(true);
  });
});
