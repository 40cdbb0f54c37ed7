import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { eventually } from './eventually.js';

/**
 * Host pids (not zombies) whose command line contains `token`. Pids a process prints from inside a pid
 * namespace mean nothing out here, so tests find what a run left behind by a unique token instead.
 */
export function processesWith(token: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (!cmdline.includes(token)) continue;
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z') continue;
      out.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/**
 * The processes with `token` still alive once the kernel has had time to reap a killed tree. Polled up to a
 * bound generous enough for a busy machine (a tree that is gone returns at once; only a survivor waits it out).
 */
export async function survivors(token: string, boundMs = 15_000): Promise<number[]> {
  const gone = await eventually(() => processesWith(token).length === 0, `no process with ${token}`, {
    timeoutMs: boundMs,
  }).catch(() => false);
  return gone ? [] : processesWith(token);
}

/**
 * Resolves once a host `sleep <seconds>; touch` started now has made its touch. A confined script that
 * began the same sleep earlier and was not stopped would have written its own marker by then, however busy
 * the machine: "nothing happens later" checks wait on the same clock as the script, not a guessed margin.
 */
export async function pastSleepOf(seconds: number): Promise<void> {
  const dir = await mkdtemp(path.join(tmpdir(), 'capsule-witness-'));
  const witness = path.join(dir, 'after');
  const child = spawn('sh', ['-c', `sleep ${seconds}; touch "$0"`, witness], { stdio: 'ignore' });
  try {
    await eventually(() => existsSync(witness), `a witness sleeping ${seconds} s to touch its marker`, {
      timeoutMs: seconds * 1000 + 60_000,
    });
  } finally {
    child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
}

/** Kill what a failing test left behind, so one failure does not leak into the next. */
export function killAll(token: string): void {
  for (const pid of processesWith(token)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}
