import { readFileSync } from 'node:fs';
import path from 'node:path';

/** A container's count of forks its pids limit refused so far (the kernel's own counter), or undefined. */
export type PidsHits = () => number | undefined;

const read = (file: string): string | undefined => {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
};

/**
 * The kernel's record of the pids limit for the container whose first process is `pid` on this host: its
 * pids cgroup's `pids.events` (`max N`, the forks refused at pids.max; cgroup v1 and v2 alike). Undefined
 * unless the process's cgroup is the container's (its path names `containerId`): a pid seen through an
 * engine in another pid namespace, or one reused since, is never read as the container's.
 */
export function containerPidsHits(
  pid: number,
  containerId: string,
  cgroupRoot = '/sys/fs/cgroup',
  procRoot = '/proc',
): PidsHits | undefined {
  if (!Number.isInteger(pid) || pid <= 0 || !/^[0-9a-f]{12,64}$/.test(containerId)) return undefined;
  const table = read(path.join(procRoot, String(pid), 'cgroup'));
  if (table === undefined) return undefined;
  let file: string | undefined;
  for (const line of table.split('\n')) {
    const [, controllers, where] = /^\d+:([^:]*):(.*)$/.exec(line) ?? [];
    if (where === undefined || !where.includes(containerId) || where.includes('..')) continue;
    if (controllers?.split(',').includes('pids')) file = path.join(cgroupRoot, 'pids', where, 'pids.events');
    else if (controllers === '' && file === undefined) file = path.join(cgroupRoot, where, 'pids.events');
  }
  if (file === undefined || read(file) === undefined) return undefined;
  const events = file;
  return () => {
    const text = read(events);
    if (text === undefined) return undefined;
    const hits = /^max (\d+)$/m.exec(text)?.[1];
    return hits === undefined ? undefined : Number(hits);
  };
}
