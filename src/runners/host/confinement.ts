import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import {
  accessSync,
  closeSync,
  constants as fsConstants,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { singleQuoted } from '../../base/shell-quote.js';
import { seccompProgram } from '../seccomp.js';
import { bwrapArgs, confinedArgv, type ConfinementTools } from './bwrap.js';
import {
  cgroupLayout,
  createCgroup,
  removeCgroup,
  sweepStaleCgroups,
  type CgroupLayout,
  type RunCgroup,
} from './cgroups.js';

/** Fixed locations of the tools confinement needs; never looked up on a caller's PATH. */
const SYSTEM_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin'];

/** What confinement host processes get on this machine, as measured by {@link probeHostConfinement}. */
export interface HostConfinement {
  /** A user namespace of the run's own: no capability over the host, whoever capsule runs as. */
  userNamespace: boolean;
  /** Own pid namespace and /proc: nothing outlives the run, capsule's environment is not visible. */
  pidNamespace: boolean;
  /** The namespace is killed when capsule dies (even by SIGKILL). */
  diesWithCapsule: boolean;
  /** Every capability set empty (bounding set included) and no_new_privs, measured inside. */
  noCapabilities: boolean;
  /** /dev holds only null, zero, full, random, urandom, tty and a private pts: no host device. */
  minimalDev: boolean;
  /** /proc/sys and /sys are read-only. */
  kernelReadOnly: boolean;
  /** The syscall filter (seccomp.ts) is in force. */
  syscallFilter: boolean;
  /** Protected paths are mounted read-only and the process cannot remount them. */
  readOnlyPaths: boolean;
  /** Hidden paths show nothing of what they hold. */
  hiddenPaths: boolean;
  /** How a stop ends a run: freezing its cgroup then killing it, killing its namespace, or its process group. */
  stop: 'freeze-then-kill' | 'namespace-kill' | 'group-kill';
  /** limits.memoryMb is enforced (a cgroup of the run's own). */
  memoryLimit: boolean;
  /** limits.pids is enforced (a cgroup of the run's own). */
  pidsLimit: boolean;
  /** Why something above is missing (empty when everything holds). */
  missing: string[];
  /** Resolved tools (absolute paths) when pidNamespace holds. */
  tools?: ConfinementTools | undefined;
  /** Where the run's cgroup is made, when runs get one. */
  cgroup?: CgroupLayout | undefined;
}

/** One line for the isolation report and `capsule show`. */
export function describeConfinement(c: HostConfinement): string {
  if (!c.pidNamespace) {
    return `unconfined host process (${c.missing.join('; ')}): a process that leaves its group can outlive the run and read capsule's environment through /proc`;
  }
  const held = (ok: boolean, yes: string, no: string): string => (ok ? yes : no);
  const parts = [
    'own user, pid, ipc and mount namespaces (nothing outlives the run; capsule’s environment not visible)',
    held(c.noCapabilities, 'no capability over the host', 'capabilities NOT all dropped'),
    held(c.minimalDev, 'minimal /dev', 'host devices visible'),
    held(c.kernelReadOnly, 'kernel tunables read-only', 'kernel tunables writable'),
    held(c.syscallFilter, 'syscall filter', 'NO syscall filter'),
    held(c.readOnlyPaths, "capsule's state read-only", "capsule's state writable"),
    held(c.hiddenPaths, 'its per-user state hidden', 'its per-user state visible'),
    c.stop === 'freeze-then-kill' ? 'a stop freezes then kills the run' : 'a stop kills the namespace',
  ];
  if (c.diesWithCapsule) parts.push('dies with capsule');
  const limits = [c.memoryLimit ? 'memory' : undefined, c.pidsLimit ? 'pids' : undefined].filter(Boolean);
  parts.push(
    limits.length > 0 ? `${limits.join(' and ')} limits enforced` : 'memory and pids limits NOT enforced',
  );
  return parts.join(', ');
}

function findTool(name: string, dirs: readonly string[]): string | undefined {
  for (const dir of dirs) {
    const file = path.join(dir, name);
    try {
      accessSync(file, fsConstants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** The check a probe runs inside the confinement; each line it prints names a guarantee that failed. */
function probeScript(file: string, hiddenDir: string): string {
  const f = singleQuoted(file);
  return [
    // The command is the init of its own pid namespace, alone in it.
    'test "$$" = 1 || echo not-alone',
    'n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; [ "$n" -le 4 ] || echo host-proc',
    'while read -r k v; do case "$k" in',
    '  CapInh:|CapPrm:|CapEff:|CapBnd:|CapAmb:) [ "$v" = 0000000000000000 ] || echo caps-left;;',
    '  NoNewPrivs:) [ "$v" = 1 ] || echo caps-left;;',
    '  Seccomp:) [ "$v" = 2 ] || echo no-filter;;',
    'esac; done < /proc/self/status',
    'for d in /dev/* /dev/.[!.]*; do [ -e "$d" ] || [ -L "$d" ] || continue; case "${d#/dev/}" in',
    '  null|zero|full|random|urandom|tty|pts|ptmx|shm|fd|stdin|stdout|stderr|core) ;;',
    '  *) echo dev-extra;; esac; done',
    'for d in /dev/pts/*; do [ "$d" = /dev/pts/ptmx ] || [ ! -e "$d" ] || echo dev-extra; done',
    // The last mount on a path is the one in force (a shadowed rw one below it does not count).
    's=; ps=; while read -r _ _ _ _ mp opts _; do case "$mp" in',
    '  /sys) s=$opts;; /proc/sys) ps=$opts;; esac; done < /proc/self/mountinfo',
    'for o in "$s" "$ps"; do case "$o" in ro|ro,*) ;; *) echo kernel-writable;; esac; done',
    `( echo y > ${f} ) 2>/dev/null && echo state-written`,
    `[ -z "$(ls -A ${singleQuoted(hiddenDir)} 2>/dev/null)" ] || echo hidden-visible`,
    '[ -w /sys/fs/cgroup ] && echo cgroups-writable',
    'echo probe-ran',
  ].join('\n');
}

/**
 * Measure what confinement works here by running it: the namespaces, what the process holds (capabilities,
 * devices, kernel tunables, the filter), a read-only path it cannot write, a hidden one it cannot read, and a
 * cgroup that takes limits. Synchronous (one short process, a few ms) so the isolation report can be built
 * from it.
 */
export function probeHostConfinement(options: { toolDirs?: readonly string[] } = {}): HostConfinement {
  const missing: string[] = [];
  const result: HostConfinement = {
    userNamespace: false,
    pidNamespace: false,
    diesWithCapsule: false,
    noCapabilities: false,
    minimalDev: false,
    kernelReadOnly: false,
    syscallFilter: false,
    readOnlyPaths: false,
    hiddenPaths: false,
    stop: 'group-kill',
    memoryLimit: false,
    pidsLimit: false,
    missing,
  };
  if (process.platform !== 'linux') {
    missing.push(`no Linux namespaces on ${process.platform}`);
    return result;
  }
  const dirs = options.toolDirs ?? SYSTEM_DIRS;
  const tools = { bwrap: findTool('bwrap', dirs), sh: findTool('sh', dirs) };
  if (tools.bwrap === undefined || tools.sh === undefined) {
    missing.push(
      tools.bwrap === undefined
        ? 'bubblewrap (bwrap) is not installed: apt-get install bubblewrap'
        : 'no sh in the system folders',
    );
    return result;
  }
  const found = tools as ConfinementTools;
  const layout = cgroupLayout();
  sweepStaleCgroups(layout);
  const scratch = mkdtempSync(path.join(tmpdir(), 'capsule-probe-'));
  let group: RunCgroup | undefined;
  let filterFd: number | undefined;
  try {
    const file = path.join(scratch, 'protected');
    const hidden = path.join(scratch, 'hidden');
    writeFileSync(file, 'x');
    mkdirSync(hidden);
    writeFileSync(path.join(hidden, 'secret'), 'k');
    try {
      if (layout !== undefined) group = createCgroup(layout, { memoryBytes: 64 * 1024 * 1024, pids: 16 });
    } catch {
      group = undefined;
    }
    const program = seccompProgram();
    if (program !== undefined) {
      writeFileSync(path.join(scratch, 'filter'), program);
      filterFd = openSync(path.join(scratch, 'filter'), 'r');
    }
    const attempt = (withGroup: boolean): SpawnSyncReturns<string> => {
      const argv = confinedArgv(
        found,
        withGroup ? group : undefined,
        bwrapArgs({ readOnly: [file], hidden: [hidden] }, filterFd === undefined ? undefined : 3, scratch, [
          found.sh,
          '-c',
          probeScript(file, hidden),
        ]),
      );
      return spawnSync(argv.file, argv.args, {
        encoding: 'utf8',
        env: { PATH: '/usr/bin:/bin' },
        timeout: 5000,
        stdio: ['ignore', 'pipe', 'pipe', ...(filterFd === undefined ? [] : [filterFd])],
      });
    };
    let r = attempt(group !== undefined);
    if (!(r.stdout ?? '').includes('probe-ran') && group !== undefined) {
      // Not allowed to join the cgroup (another user's, a read-only cgroupfs): confined without limits.
      removeCgroup(group);
      group = undefined;
      r = attempt(false);
    }
    const out = r.stdout ?? '';
    if (!out.includes('probe-ran')) {
      const why = (r.stderr ?? '').trim().split('\n').pop() ?? '';
      missing.push(
        `bubblewrap could not confine a process here (${why || r.error?.message || `exit ${r.status}`}; needs root or unprivileged user namespaces)`,
      );
      return result;
    }
    readProbe(result, out, {
      filter: program !== undefined,
      protectedIntact: () => readFileSync(file, 'utf8') === 'x',
      limited: group !== undefined,
      layout,
    });
    result.tools = found;
    return result;
  } finally {
    if (filterFd !== undefined) closeSync(filterFd);
    if (group !== undefined) removeCgroup(group);
    rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * What the probe's output says held (each line it printed names a guarantee that failed, `result.missing`
 * says why), with what capsule saw from outside: a filter to give, the protected file unchanged, a cgroup
 * the run joined, and where cgroups are made.
 */
function readProbe(
  result: HostConfinement,
  out: string,
  seen: {
    filter: boolean;
    protectedIntact: () => boolean;
    limited: boolean;
    layout: CgroupLayout | undefined;
  },
): void {
  const held = (flag: string, what: string): boolean => {
    if (out.includes(flag)) result.missing.push(what);
    return !out.includes(flag);
  };
  result.pidNamespace = held('not-alone', 'the command is not alone in its pid namespace');
  result.pidNamespace = held('host-proc', '/proc shows the host') && result.pidNamespace;
  result.userNamespace = result.pidNamespace;
  result.diesWithCapsule = result.pidNamespace;
  result.noCapabilities = held('caps-left', 'capabilities or no_new_privs not in force');
  result.minimalDev = held('dev-extra', '/dev holds more than the minimal devices');
  result.kernelReadOnly = held('kernel-writable', '/proc/sys or /sys is writable');
  result.syscallFilter = seen.filter && held('no-filter', 'the syscall filter is not in force');
  if (!seen.filter) result.missing.push(`no syscall filter for ${process.arch}`);
  result.readOnlyPaths =
    held('state-written', 'protected paths could not be made read-only') && seen.protectedIntact();
  result.hiddenPaths = held('hidden-visible', 'hidden paths stay visible');
  if (seen.limited && held('cgroups-writable', 'the cgroup hierarchies are writable')) {
    result.memoryLimit = true;
    result.pidsLimit = true;
    result.cgroup = seen.layout;
    result.stop = 'freeze-then-kill';
  } else {
    result.stop = 'namespace-kill';
    result.missing.push(
      seen.layout === undefined
        ? 'no cgroup with memory and pids controllers capsule may create'
        : 'cgroup limits could not be set',
    );
  }
  if (
    result.stop === 'freeze-then-kill' &&
    seen.layout?.version === 1 &&
    seen.layout.freezerParent === undefined
  )
    result.stop = 'namespace-kill';
}
