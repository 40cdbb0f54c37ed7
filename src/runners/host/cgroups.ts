import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { processAlive } from '../process-alive.js';
import { readOr } from './read-or.js';

/** A run's own cgroup: its limits, the counters of their hits, and a stop that freezes then kills. */

/** How long a stop waits for the freezer to hold every process before killing them anyway. */
const FREEZE_READS = 2000;
/** How often, and how many times, a finished run's cgroup is read until its last process is gone. */
export const DRAIN_POLL_MS = 2;
export const DRAIN_TRIES = 1000;

/** Where a run's cgroup is created, per controller. */
export interface CgroupLayout {
  version: 1 | 2;
  /** Parent folders the run's own cgroup is created in: v1 one per controller, v2 one for all. */
  memoryParent: string;
  pidsParent: string;
  /** v1 only: the freezer hierarchy's parent, when the machine has it (v2 freezes in the same folder). */
  freezerParent?: string | undefined;
}

/** The cgroup folders this process lives in, per v1 controller ('' for the v2 line). */
function ownCgroups(): Map<string, string> {
  const out = new Map<string, string>();
  try {
    for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
      const [, controllers, where] = line.split(':', 3) as [string, string | undefined, string | undefined];
      if (controllers === undefined || where === undefined) continue;
      for (const c of controllers.split(',')) out.set(c, where);
    }
  } catch {
    // no /proc: no cgroups
  }
  return out;
}

/** Where this machine lets capsule create a cgroup with memory and pids limits (as a child of its own). */
export function cgroupLayout(): CgroupLayout | undefined {
  const own = ownCgroups();
  const v1 = (controller: string): string | undefined => {
    const base = path.join('/sys/fs/cgroup', controller);
    const where = own.get(controller);
    if (where === undefined || !existsSync(path.join(base, 'cgroup.procs'))) return undefined;
    // Nested under capsule's own cgroup, so a run never escapes the limits capsule itself is under.
    const parent = path.join(base, where);
    return existsSync(parent) ? parent : undefined;
  };
  const memory = v1('memory');
  const pids = v1('pids');
  if (memory !== undefined && pids !== undefined)
    return { version: 1, memoryParent: memory, pidsParent: pids, freezerParent: v1('freezer') };
  const unified = own.get('');
  if (unified !== undefined && existsSync('/sys/fs/cgroup/cgroup.controllers')) {
    const parent = path.join('/sys/fs/cgroup', unified);
    try {
      const enabled = readFileSync(path.join(parent, 'cgroup.subtree_control'), 'utf8');
      if (!/\bmemory\b/.test(enabled) || !/\bpids\b/.test(enabled)) {
        writeFileSync(path.join(parent, 'cgroup.subtree_control'), '+memory +pids');
      }
      return { version: 2, memoryParent: parent, pidsParent: parent };
    } catch {
      // v2 forbids controllers below a cgroup that holds processes: no limits here
    }
  }
  return undefined;
}

export interface RunCgroup {
  memoryDir: string;
  pidsDir: string;
  /** v1 freezer folder, or the v2 folder (cgroup.freeze / cgroup.kill live there). */
  freezerDir?: string | undefined;
  dirs: string[];
  procsFiles: string[];
  layout: CgroupLayout;
}

export function createCgroup(
  layout: CgroupLayout,
  limits: { memoryBytes?: number | undefined; pids?: number | undefined },
): RunCgroup {
  const name = `capsule-${process.pid}-${randomBytes(6).toString('hex')}`;
  const memoryDir = path.join(layout.memoryParent, name);
  const pidsDir = path.join(layout.pidsParent, name);
  const freezerDir =
    layout.version === 2
      ? memoryDir
      : layout.freezerParent === undefined
        ? undefined
        : path.join(layout.freezerParent, name);
  const dirs = [...new Set([memoryDir, pidsDir, ...(freezerDir === undefined ? [] : [freezerDir])])];
  const group: RunCgroup = {
    memoryDir,
    pidsDir,
    freezerDir,
    dirs: [],
    procsFiles: [],
    layout,
  };
  try {
    for (const d of dirs) {
      mkdirSync(d);
      group.dirs.push(d);
    }
    group.procsFiles = group.dirs.map((d) => path.join(d, 'cgroup.procs'));
    setCgroupLimits(group, limits);
  } catch (err) {
    removeCgroup(group);
    throw err;
  }
  return group;
}

/** Write a run's limits into its cgroup (before anything of the run starts). */
export function setCgroupLimits(
  group: RunCgroup,
  limits: { memoryBytes?: number | undefined; pids?: number | undefined },
): void {
  const { layout, memoryDir, pidsDir } = group;
  if (limits.memoryBytes !== undefined) {
    if (layout.version === 1) {
      writeFileSync(path.join(memoryDir, 'memory.limit_in_bytes'), String(limits.memoryBytes));
      // With swap, the RAM limit alone would only make the run swap.
      const memsw = path.join(memoryDir, 'memory.memsw.limit_in_bytes');
      if (existsSync(memsw)) writeFileSync(memsw, String(limits.memoryBytes));
    } else {
      writeFileSync(path.join(memoryDir, 'memory.max'), String(limits.memoryBytes));
      writeFileSync(path.join(memoryDir, 'memory.swap.max'), '0');
    }
  }
  if (limits.pids !== undefined) writeFileSync(path.join(pidsDir, 'pids.max'), String(limits.pids));
}

/** Counters of limit hits so far. */
export function limitHits(group: RunCgroup): { memory: boolean; pids: boolean } {
  const { memoryDir, pidsDir } = group;
  const memory =
    group.layout.version === 1
      ? /\boom_kill [1-9]/.test(readOr(path.join(memoryDir, 'memory.oom_control')))
      : /\boom_kill [1-9]/.test(readOr(path.join(memoryDir, 'memory.events')));
  const pids = /\bmax [1-9]/.test(readOr(path.join(pidsDir, 'pids.events')));
  return { memory, pids };
}

/**
 * End every process of a run's cgroup but `spare` at once: freeze the group, so no process of it runs another
 * instruction, SIGKILL each, thaw (a frozen process dies when it thaws, before it runs anything). `spare` is
 * capsule's own bwrap outside the namespace: it sees its init die, reaps it and exits, so nothing is left
 * for the host's init to reap. Returns false when the group could not be frozen or held no process of the
 * run yet (a wrapper that has not joined it).
 */
export function killCgroup(group: RunCgroup, spare: number | undefined): boolean {
  const dir = group.freezerDir;
  if (dir === undefined) return false;
  const v2 = group.layout.version === 2;
  const control = path.join(dir, v2 ? 'cgroup.freeze' : 'freezer.state');
  try {
    writeFileSync(control, v2 ? '1' : 'FROZEN');
  } catch {
    return false;
  }
  const frozen = (): boolean =>
    v2 ? /\bfrozen 1\b/.test(readOr(path.join(dir, 'cgroup.events'))) : readOr(control).trim() === 'FROZEN';
  for (let i = 0; i < FREEZE_READS && !frozen(); i++) {
    // Freezing is asynchronous: wait (briefly) until every task is held.
  }
  let killed = 0;
  for (const pid of readOr(path.join(dir, 'cgroup.procs')).split('\n')) {
    const n = Number(pid);
    if (!Number.isInteger(n) || n <= 0 || n === spare) continue;
    try {
      process.kill(n, 'SIGKILL');
      killed++;
    } catch {
      // already gone
    }
  }
  try {
    writeFileSync(control, v2 ? '0' : 'THAWED');
  } catch {
    // the group is gone with its tasks
  }
  return killed > 0;
}

/**
 * Resolves once no process is left in the run's cgroup (the namespace's processes die a moment after the
 * bwrap that capsule waited for), so a run's result means the run is gone; bounded, for a task stuck in
 * the kernel.
 */
export async function drained(group: RunCgroup): Promise<void> {
  const procs = path.join(group.pidsDir, 'cgroup.procs');
  for (let i = 0; i < DRAIN_TRIES && readOr(procs).trim() !== ''; i++) {
    await new Promise((resolve) => setTimeout(resolve, DRAIN_POLL_MS));
  }
}

export function removeCgroup(group: RunCgroup): boolean {
  let ok = true;
  for (const d of group.dirs) {
    try {
      rmdirSync(d);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') ok = false;
    }
  }
  return ok;
}

export function removeLater(group: RunCgroup, tries: number): void {
  setTimeout(() => {
    if (!removeCgroup(group) && tries > 1) removeLater(group, tries - 1);
  }, 10).unref();
}

/** Empty cgroups left by a capsule that was killed before it could remove them. */
export function sweepStaleCgroups(layout: CgroupLayout | undefined): void {
  if (layout === undefined) return;
  const parents = [layout.memoryParent, layout.pidsParent, layout.freezerParent];
  for (const parent of new Set(parents.filter((p): p is string => p !== undefined))) {
    let names: string[] = [];
    try {
      names = readdirSync(parent).filter((n) => n.startsWith('capsule-'));
    } catch {
      continue;
    }
    for (const n of names) {
      const owner = Number(n.split('-')[1]);
      if (owner === process.pid || processAlive(owner)) continue;
      try {
        rmdirSync(path.join(parent, n));
      } catch {
        // still has tasks (they die with their namespace) or already gone
      }
    }
  }
}
