import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';

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

/** The processes with `token` still alive after giving the kernel a moment to reap them. */
export async function survivors(token: string): Promise<number[]> {
  for (let i = 0; i < 20; i++) {
    if (processesWith(token).length === 0) return [];
    await delay(50);
  }
  return processesWith(token);
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
