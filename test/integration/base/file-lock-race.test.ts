import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { withFileLock } from '../../../src/base/file-lock.js';

const LOCK_MODULE = path.resolve('dist', 'base', 'file-lock.js');
const AUDIT_WRITER = path.resolve('dist', 'permissions', 'audit', 'writer.js');
const AUDIT_VERIFY = path.resolve('dist', 'permissions', 'audit', 'verify.js');

// Each process appends eight decisions at once to the same hash-chained audit log.
const AUDIT_CHILD = `
const { JsonlAuditLog } = await import(process.argv[2]);
const [file, id] = process.argv.slice(3);
const log = new JsonlAuditLog(file, { now: () => Date.now() });
await Promise.all(Array.from({ length: 8 }, (_, i) => log.append({
  tool: 'run_capability', key: 'run_capability:' + id + '-' + i, decision: 'allow',
  source: 'session-allowlist', reason: 'test', mode: 'default',
})));
`;

// Each process runs several lock calls at once on a lock left stale by a crashed holder. Inside,
// a holder claims `inside` with O_EXCL: a second holder at the same time finds it there and leaves
// a violation marker. Breaking a stale lock by check-then-delete lets a late breaker delete the
// fresh lock of an early one, so two hold it at once.
const CHILD = `
import { open, unlink, writeFile, stat } from 'node:fs/promises';
import path from 'node:path';
const { withFileLock } = await import(process.argv[2]);
const [lock, dir, id] = process.argv.slice(3);
const inside = path.join(dir, 'inside');
await Promise.all(Array.from({ length: 4 }, (_, i) => withFileLock(lock, async () => {
  let handle;
  try {
    handle = await open(inside, 'wx');
  } catch {
    await writeFile(path.join(dir, 'violation-' + id + '-' + i), '');
    return;
  }
  await handle.close();
  // A few round trips through the file system while holding, so an overlapping holder would meet us.
  for (let k = 0; k < 5; k++) await stat(dir);
  await unlink(inside);
  await writeFile(path.join(dir, 'held-' + id + '-' + i), '');
}, { timeoutMs: 60_000 })));
`;

// Holds the lock (stale threshold 2 s), says so, then waits for \`go\` before its work ends; prints the
// error code its withFileLock ended with, if any.
const STALLING = `
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
const { withFileLock } = await import(process.argv[2]);
const [lock, dir] = process.argv.slice(3);
try {
  await withFileLock(lock, async () => {
    writeFileSync(path.join(dir, 'held'), '');
    while (!existsSync(path.join(dir, 'go'))) await sleep(20);
  }, { staleMs: 2000 });
  process.stdout.write('done');
} catch (err) {
  process.stdout.write(String(err.code));
}
`;

function runChild(script: string, args: string[], module = LOCK_MODULE): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, pathToFileURL(module).href, ...args], {
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    child.on('error', reject);
    child.on('exit', (code) => resolve(code));
  });
}

describe('file lock: a stale lock is broken by one process only', () => {
  it('processes racing to break a crashed holder’s lock never hold it together', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-lock-race-'));
    try {
      const script = path.join(dir, 'child.mjs');
      await writeFile(script, CHILD);
      for (let round = 0; round < 25; round++) {
        const work = path.join(dir, `round-${round}`);
        await rm(work, { recursive: true, force: true });
        await mkdir(work);
        const lock = path.join(work, 'x.lock');
        // A lock left by a holder that died long ago (no such pid, far older than any stale threshold).
        await writeFile(lock, JSON.stringify({ pid: 2 ** 22 + 7, at: 0 }));
        const old = new Date(Date.now() - 3_600_000);
        await utimes(lock, old, old);
        const codes = await Promise.all(
          Array.from({ length: 4 }, (_, id) => runChild(script, [lock, work, String(id)])),
        );
        expect(codes).toEqual([0, 0, 0, 0]);
        const names = await readdir(work);
        expect(names.filter((n) => n.startsWith('violation-'))).toEqual([]);
        expect(names.filter((n) => n.startsWith('held-'))).toHaveLength(16);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a holder stopped past the stale threshold keeps the lock: nobody writes under it, and it finishes when resumed', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-lock-stall-'));
    const script = path.join(dir, 'stall.mjs');
    await writeFile(script, STALLING);
    const lock = path.join(dir, 'x.lock');
    const child = spawn(process.execPath, [script, pathToFileURL(LOCK_MODULE).href, lock, dir], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      let out = '';
      child.stdout.on('data', (b: Buffer) => (out += b.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
      while (!existsSync(path.join(dir, 'held'))) await sleep(20);
      // Stopped while holding: its lock's mtime is no longer kept fresh and goes stale (2 s) — a lease alone
      // would now be broken, and the stopped holder would write on what it read when it wakes.
      child.kill('SIGSTOP');
      await sleep(2_500);
      let ranInside = false;
      await expect(
        withFileLock(lock, () => Promise.resolve((ranInside = true)), { staleMs: 2000, timeoutMs: 1500 }),
      ).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
      expect(ranInside).toBe(false);
      expect(existsSync(lock)).toBe(true);
      child.kill('SIGCONT');
      await writeFile(path.join(dir, 'go'), '');
      expect(await exited).toBe(0);
      expect(out).toBe('done');
      // Released: the next holder takes it.
      await withFileLock(lock, () => Promise.resolve((ranInside = true)), { staleMs: 2000, timeoutMs: 5000 });
      expect(ranInside).toBe(true);
      expect(existsSync(lock)).toBe(false);
    } finally {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a process that exits while holding leaves no lock behind', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-lock-exit-'));
    try {
      const script = path.join(dir, 'exit.mjs');
      await writeFile(
        script,
        `const { withFileLock } = await import(process.argv[2]);
await withFileLock(process.argv[3], async () => process.exit(3));`,
      );
      const lock = path.join(dir, 'x.lock');
      expect(await runChild(script, [lock])).toBe(3);
      expect(existsSync(lock)).toBe(false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('processes appending to one audit log whose lock a crashed holder left never fork the chain', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-lock-audit-'));
    try {
      const script = path.join(dir, 'append.mjs');
      await writeFile(script, AUDIT_CHILD);
      const log = path.join(dir, 'audit.jsonl');
      for (let round = 0; round < 5; round++) {
        await rm(log, { force: true });
        // The audit log's lock, left by a holder that died long ago.
        await writeFile(`${log}.lock`, JSON.stringify({ pid: 2 ** 22 + 7, at: 0 }));
        const old = new Date(Date.now() - 3_600_000);
        await utimes(`${log}.lock`, old, old);
        const codes = await Promise.all(
          Array.from({ length: 4 }, (_, id) => runChild(script, [log, `p${id}`], AUDIT_WRITER)),
        );
        expect(codes).toEqual([0, 0, 0, 0]);
        const { verifyAuditLog } = (await import(pathToFileURL(AUDIT_VERIFY).href)) as {
          verifyAuditLog: (file: string) => Promise<{ ok: boolean; problem?: string }>;
        };
        const verdict = await verifyAuditLog(log);
        expect(verdict.ok, verdict.problem).toBe(true);
        const lines = (await readFile(log, 'utf8')).split('\n').filter(Boolean);
        // Every append is there once: a forked chain would lose or interleave records.
        expect(lines).toHaveLength(4 * 8);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
