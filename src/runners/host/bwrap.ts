import { singleQuoted } from '../../base/shell-quote.js';
import type { RunCgroup } from './cgroups.js';
import { ancestors, inside, type RunProtection } from './protection.js';

/** The programs a confined run starts from (absolute paths, never looked up on a caller's PATH). */
export interface ConfinementTools {
  bwrap: string;
  sh: string;
}

/**
 * bubblewrap's arguments for a run (a pure function of the plan): the namespaces, the file system view,
 * the protected paths, the syscall filter on `seccompFd`, then the command.
 */
export function bwrapArgs(
  protection: Pick<RunProtection, 'readOnly' | 'hidden'> & Partial<RunProtection>,
  seccompFd: number | undefined,
  cwd: string,
  command: readonly string[],
): string[] {
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  const args = [
    // A user namespace even for root: capabilities inside it are none over the host, and they are dropped.
    '--unshare-user',
    '--uid',
    String(uid),
    '--gid',
    String(gid),
    '--unshare-pid',
    // The command is the namespace's init: capsule's bwrap waits for it and reaps it (bwrap's own init would
    // exit unreaped, and hold the run's cgroup until the host's init reaps it).
    '--as-pid-1',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
    '--die-with-parent',
    '--cap-drop',
    'ALL',
    // The user's files, as the user (submounts included; device nodes on them do not open).
    '--bind',
    '/',
    '/',
    '--dev',
    '/dev',
    '--proc',
    '/proc',
    '--ro-bind',
    '/proc/sys',
    '/proc/sys',
    '--ro-bind-try',
    '/proc/sysrq-trigger',
    '/proc/sysrq-trigger',
    '--ro-bind',
    '/sys',
    '/sys',
  ];
  const all = [...protection.readOnly, ...protection.hidden];
  // Every ancestor a mount point: a folder holding capsule's state cannot be renamed away and replaced.
  const mountPoints = [...new Set(all.flatMap((p) => ancestors(p)))].filter((d) => d !== '/').sort();
  for (const dir of mountPoints) args.push('--bind', dir, dir);
  // A folder holding a link on the way: read-only, its entries re-bound writable; then the mount points
  // below it again (the re-binds covered them).
  const pins = protection.pins ?? [];
  for (const pin of pins) {
    args.push('--ro-bind', pin.dir, pin.dir);
    for (const w of pin.writable) args.push('--bind', w, w);
  }
  for (const dir of mountPoints.filter((d) => pins.some((pin) => d !== pin.dir && inside(d, pin.dir))))
    args.push('--bind', dir, dir);
  for (const p of protection.readOnly) args.push('--ro-bind', p, p);
  // A daemon's socket is covered by /dev/null: a connect to it is refused.
  for (const s of protection.sockets ?? []) args.push('--ro-bind-try', '/dev/null', s);
  for (const p of protection.hidden) args.push('--perms', '0500', '--tmpfs', p, '--remount-ro', p);
  if (seccompFd !== undefined) args.push('--seccomp', String(seccompFd));
  args.push('--chdir', cwd, '--', ...command);
  return args;
}

/**
 * The argv of a confined run: bwrap, behind a short `sh` that first joins the run's cgroup(s) when it has
 * them, so every process of the run, bwrap included, is counted and can be frozen.
 */
export function confinedArgv(
  tools: ConfinementTools,
  group: RunCgroup | undefined,
  bwrap: string[],
): { file: string; args: string[] } {
  if (group === undefined) return { file: tools.bwrap, args: bwrap };
  const join = group.procsFiles.map((f) => `echo 0 > ${singleQuoted(f)}`);
  return {
    file: tools.sh,
    args: ['-c', ['set -e', ...join, 'exec "$@"'].join('\n'), 'capsule-join', tools.bwrap, ...bwrap],
  };
}
