import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import {
  accessSync,
  chownSync,
  closeSync,
  constants as fsConstants,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import { CappedOutput } from './capped-output.js';
import type { RunResult } from './types.js';
import { singleQuoted } from '../base/shell-quote.js';
import { processAlive } from './process-alive.js';
import { seccompProgram } from './seccomp.js';
import { packageRoot } from '../base/package-root.js';
import type { HostProtection } from '../project/protected-state.js';

/**
 * The one way capsule starts a host process (shell capabilities, the agent's run_command, `capsule exec`).
 *
 * Where the machine has bubblewrap (`bwrap`) and namespaces, the process runs in a user, pid, ipc and mount
 * namespace of its own, built the same way whether capsule is root or not:
 *  - it holds no capability over the host: a fresh user namespace (root maps to root, a user to itself) with
 *    every capability dropped, the bounding set included, and no_new_privs — so nothing reaches around a
 *    read-only mount (file handles, remounts, raw devices) even when capsule runs as root;
 *  - a minimal /dev (null, zero, full, random, urandom, tty, a private pts), /proc of its own namespace with
 *    /proc/sys read-only, /sys read-only, and a syscall filter (seccomp.ts) refusing what no ordinary command
 *    needs; everything else of the file system is the user's, as the user: builds and commits still work;
 *  - capsule's protected state is read-only, its per-user state hidden, and every ancestor of a protected
 *    path is a mount point (a mount point cannot be renamed away and replaced);
 *  - nothing outlives the run, and a stop is a stop: the run's cgroup is frozen, every process in it killed,
 *    then thawed (or the cgroup killed at once, v2); without a cgroup the namespace is killed (its init's death
 *    kills every process in it); never a SIGTERM grace in which a script runs its next command;
 *  - the namespace dies with capsule (bwrap --die-with-parent), also when capsule is killed;
 *  - memory and pids limits are a cgroup of its own, polled for hits.
 * Elsewhere it falls back to a detached process group that is killed as a whole, and says so through
 * {@link HostConfinement}, which is measured by a probe, never assumed.
 */

/** Fixed locations of the tools confinement needs; never looked up on a caller's PATH. */
const SYSTEM_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin'];
const LIMIT_POLL_MS = 25;
/** Confined inits kept ready per kind of call: back-to-back calls find one whose set-up is done. */
const PRESTART_DEPTH = 2;
/** How long a stop waits for the freezer to hold every process before killing them anyway. */
const FREEZE_READS = 2000;
/** How often, and how many times, a finished run's cgroup is read until its last process is gone. */
const DRAIN_POLL_MS = 2;
const DRAIN_TRIES = 1000;
/** How long capsule's bwrap has to exit once its namespace is killed, before it is killed too. */
const WRAPPER_EXIT_MS = 2000;

const NO_PROTECTION: HostProtection = { readOnly: [], hidden: [] };

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
  tools?: { bwrap: string; sh: string } | undefined;
  /** Where the run's cgroup is made, when runs get one. */
  cgroup?: CgroupLayout | undefined;
}

/** Where a run's cgroup is created, per controller. */
export interface CgroupLayout {
  version: 1 | 2;
  /** Parent folders the run's own cgroup is created in: v1 one per controller, v2 one for all. */
  memoryParent: string;
  pidsParent: string;
  /** v1 only: the freezer hierarchy's parent, when the machine has it (v2 freezes in the same folder). */
  freezerParent?: string | undefined;
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
function cgroupLayout(): CgroupLayout | undefined {
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

/** The directories from `/` down to (excluding) p, outermost first. */
function ancestors(p: string): string[] {
  const out: string[] = [];
  for (let dir = path.dirname(p); dir !== path.dirname(dir); dir = path.dirname(dir)) out.unshift(dir);
  return out;
}

const inside = (p: string, dir: string): boolean => p === dir || p.startsWith(dir + path.sep);

/** The paths that exist, outermost only (a path inside another is covered by it). */
function outermost(paths: readonly string[]): string[] {
  const existing = [...new Set(paths.map((p) => path.resolve(p)))].filter((p) => existsSync(p)).sort();
  return existing.filter((p, i) => !existing.slice(0, i).some((q) => inside(p, q)));
}

/** The protection a run gets: hidden paths win over read-only ones inside them. */
function effectiveProtection(
  p: HostProtection,
  own: readonly string[],
): {
  readOnly: string[];
  hidden: string[];
  sockets: string[];
  pins: LinkPin[];
} {
  // A read-only folder that is not there yet is made first: one the run could create would be its own.
  for (const dir of p.madeFolders ?? []) {
    try {
      mkdirSync(dir);
      // Made by capsule as root in someone's project: theirs, like the folder it is in.
      const parent = statSync(path.dirname(dir));
      if (process.getuid?.() === 0 && parent.uid !== 0) chownSync(dir, parent.uid, parent.gid);
    } catch {
      // There already (then bound as it is), or not makeable by capsule, so not by the run either.
    }
  }
  const mounts = ownMounts();
  const withAliases = (paths: readonly string[]): string[] =>
    paths.flatMap((q) => [q, ...aliasesOf(path.resolve(q), mounts)]);
  const hidden = outermost(withAliases(p.hidden));
  // capsule's own code is what the next capsule process runs: no command changes it.
  // A link on the way to capsule's own code (a checkout whose node_modules is a symlink) is bound at its
  // target, and the folder holding the link is pinned like any other protected path's.
  const readOnly = outermost(withAliases([...p.readOnly, ...own.map(realOr)])).filter(
    (r) => !hidden.some((h) => inside(r, h)),
  );
  const covered = (s: string): boolean => [...hidden, ...readOnly].some((d) => inside(s, d));
  return {
    readOnly,
    hidden,
    sockets: listeningSockets().filter((s) => !covered(s)),
    pins: linkPins([...p.readOnly, ...p.hidden, ...own]),
  };
}

function realOr(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

/** A folder holding a symlink on the way to a protected path: read-only, its other entries writable. */
interface LinkPin {
  dir: string;
  writable: string[];
}

/**
 * The folders that hold a symlink on the way to a protected path. A command that could re-point the link
 * would make the next capsule read a state folder of its making, so the folder is read-only for the run
 * (no entry in it can be replaced or added) while its existing entries other than links stay writable.
 */
function linkPins(paths: readonly string[]): LinkPin[] {
  const dirs = new Set<string>();
  for (const p of paths) {
    let at = '/';
    for (const part of path.resolve(p).split('/').filter(Boolean)) {
      const next = path.join(at, part);
      let link: boolean;
      try {
        link = lstatSync(next).isSymbolicLink();
      } catch {
        break;
      }
      if (!link) {
        at = next;
        continue;
      }
      dirs.add(at);
      try {
        at = realpathSync(next);
      } catch {
        break;
      }
    }
  }
  return [...dirs].sort().map((dir) => {
    const writable: string[] = [];
    try {
      for (const name of readdirSync(dir)) {
        const entry = path.join(dir, name);
        if (!lstatSync(entry).isSymbolicLink()) writable.push(entry);
      }
    } catch {
      // unreadable: the folder is read-only whole
    }
    return { dir, writable };
  });
}

/** The files of capsule itself: its package's code and dependencies, and the node binary running it. */
function ownCode(): string[] {
  const out: string[] = [];
  try {
    out.push(realpathSync(process.execPath));
    const root = packageRoot();
    for (const part of ['dist', 'node_modules']) {
      // Linked in (a workspace, a shared node_modules): the place the link leads is what is bound
      // read-only; the link itself is pinned with the folder that holds it (effectiveProtection).
      const at = path.join(root, part);
      out.push(at);
      try {
        const real = realpathSync(at);
        if (real !== at) out.push(real);
      } catch {
        // absent: nothing more to add
      }
    }
  } catch {
    // not found: nothing to add
  }
  return out;
}

/**
 * Every unix socket listening at a path on this host (/proc/net/unix: the listening flag, a path). A
 * daemon's socket (Docker's, containerd's, a session bus) lets a command ask for what its confinement
 * refuses it — a privileged container, a process outside the run — so no confined command reaches one.
 */
function listeningSockets(): string[] {
  const out = new Set<string>();
  for (const line of readOr('/proc/net/unix').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    const flags = Number.parseInt(f[3] ?? '0', 16);
    const where = f[7];
    if ((flags & 0x10000) === 0 || where === undefined || !where.startsWith('/')) continue;
    try {
      out.add(realpathSync(where));
    } catch {
      // gone, or its folder is not ours to see
    }
  }
  return [...out].sort();
}

interface Mount {
  dev: string;
  /** The folder of its file system the mount shows. */
  root: string;
  at: string;
}

/** capsule's own mount table (mountinfo's octal escapes decoded). */
function ownMounts(): Mount[] {
  const unescape = (f: string): string =>
    f.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  return readOr('/proc/self/mountinfo')
    .split('\n')
    .map((line) => line.split(' '))
    .filter((f) => f.length > 5)
    .map((f) => ({ dev: f[2] as string, root: unescape(f[3] as string), at: unescape(f[4] as string) }));
}

/** `p` relative to `dir` when it is `dir` or inside it ('' for `dir` itself). */
const below = (p: string, dir: string): string | undefined =>
  p === dir ? '' : dir === '/' ? p.slice(1) : p.startsWith(dir + '/') ? p.slice(dir.length + 1) : undefined;

/**
 * Every other name the mount table gives `p`: where the same file system is mounted again (a bind mount of
 * a parent folder elsewhere), the same bytes are reachable there, and are protected there too. A mount that
 * shows a folder inside `p` is an alias of part of it: its mount point is protected whole.
 */
function aliasesOf(p: string, mounts: readonly Mount[]): string[] {
  let home: Mount | undefined;
  for (const m of mounts)
    if (below(p, m.at) !== undefined && (home === undefined || m.at.length >= home.at.length)) home = m;
  if (home === undefined) return [];
  const inFs = path.posix.join(home.root, below(p, home.at) as string);
  const out: string[] = [];
  for (const m of mounts) {
    if (m.dev !== home.dev || m === home) continue;
    const under = below(inFs, m.root);
    if (under !== undefined) out.push(path.posix.join(m.at, under));
    else if (below(m.root, inFs) !== undefined) out.push(m.at);
  }
  return [...new Set(out)].filter((a) => a !== p);
}

/**
 * bubblewrap's arguments for a run (a pure function of the plan): the namespaces, the file system view,
 * the protected paths, the syscall filter on `seccompFd`, then the command.
 */
function bwrapArgs(
  protection: {
    readOnly: readonly string[];
    hidden: readonly string[];
    sockets?: readonly string[];
    pins?: readonly LinkPin[];
  },
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
function confinedArgv(
  tools: NonNullable<HostConfinement['tools']>,
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

/** O_CLOEXEC in /proc/self/fdinfo's octal `flags`. */
const O_CLOEXEC = 0o2000000;

/** Descriptors from `from` up that capsule holds without close-on-exec: ones it inherited (its own have it). */
function inheritedDescriptors(from: number): number[] {
  let names: string[] = [];
  try {
    names = readdirSync('/proc/self/fd');
  } catch {
    return [];
  }
  return names
    .map(Number)
    .filter((n) => Number.isInteger(n) && n >= from)
    .filter((n) => {
      const flags = /^flags:\s*([0-7]+)$/m.exec(readOr(`/proc/self/fdinfo/${n}`))?.[1];
      return flags !== undefined && (parseInt(flags, 8) & O_CLOEXEC) === 0;
    });
}

/**
 * A child's stdio with every descriptor capsule inherited from whoever started it turned into /dev/null:
 * a child would get it otherwise, and one on a folder reaches around every mount of a confined run (writes
 * through it go through the mount it was opened on). `devNull` is closed once the child is spawned.
 */
function shutInherited<T extends string>(
  stdio: readonly [T, T, T, ...T[]],
): { stdio: [T, T, T, ...(T | 'ignore' | number)[]]; devNull?: number } {
  const out: [T, T, T, ...(T | 'ignore' | number)[]] = [...stdio];
  const inherited = inheritedDescriptors(stdio.length);
  if (inherited.length === 0) return { stdio: out };
  const devNull = openSync('/dev/null', 'r');
  for (const n of inherited) {
    while (out.length < n) out.push('ignore');
    out[n] = devNull;
  }
  return { stdio: out, devNull };
}

/** A variable name `export` takes as is (anything else is started the fresh way, never rewritten). */
const PLAIN_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * What a prestarted init runs: confined and waiting, it reads the call's whole script from fd 3 (`read`
 * keeps every byte of a line: IFS empty, -r); the loop ends when capsule closes the pipe.
 */
const WAIT_FOR_CALL = [
  's=',
  'while IFS= read -r l <&3; do s="$s$l',
  '"; done',
  'exec 3<&-',
  'eval "$s"',
].join('\n');

/**
 * What a prestarted init evaluates when its call comes: exactly the call's environment (the init itself
 * started with none), its cwd, stdin /dev/null when no input is given, then the command.
 */
function callScript(options: Pick<HostProcessOptions, 'file' | 'args' | 'cwd' | 'env' | 'input'>): string {
  const lines = Object.entries(options.env).map(([k, v]) => `export ${singleQuoted(`${k}=${v}`)}`);
  lines.push(`cd ${singleQuoted(options.cwd)}`, 'unset OLDPWD');
  if (options.input === undefined) lines.push('exec </dev/null');
  lines.push(`exec ${[options.file, ...options.args].map(singleQuoted).join(' ')}`);
  return `${lines.join('\n')}\n`;
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
  const found = tools as NonNullable<HostConfinement['tools']>;
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
    const held = (flag: string, what: string): boolean => {
      if (out.includes(flag)) missing.push(what);
      return !out.includes(flag);
    };
    result.pidNamespace = held('not-alone', 'the command is not alone in its pid namespace');
    result.pidNamespace = held('host-proc', '/proc shows the host') && result.pidNamespace;
    result.userNamespace = result.pidNamespace;
    result.diesWithCapsule = result.pidNamespace;
    result.noCapabilities = held('caps-left', 'capabilities or no_new_privs not in force');
    result.minimalDev = held('dev-extra', '/dev holds more than the minimal devices');
    result.kernelReadOnly = held('kernel-writable', '/proc/sys or /sys is writable');
    result.syscallFilter = program !== undefined && held('no-filter', 'the syscall filter is not in force');
    if (program === undefined) missing.push(`no syscall filter for ${process.arch}`);
    result.readOnlyPaths =
      held('state-written', 'protected paths could not be made read-only') &&
      readFileSync(file, 'utf8') === 'x';
    result.hiddenPaths = held('hidden-visible', 'hidden paths stay visible');
    if (group !== undefined && held('cgroups-writable', 'the cgroup hierarchies are writable')) {
      result.memoryLimit = true;
      result.pidsLimit = true;
      result.cgroup = layout;
      result.stop = 'freeze-then-kill';
    } else {
      result.stop = 'namespace-kill';
      missing.push(
        layout === undefined
          ? 'no cgroup with memory and pids controllers capsule may create'
          : 'cgroup limits could not be set',
      );
    }
    if (result.stop === 'freeze-then-kill' && layout?.version === 1 && layout.freezerParent === undefined)
      result.stop = 'namespace-kill';
    result.tools = found;
    return result;
  } finally {
    if (filterFd !== undefined) closeSync(filterFd);
    if (group !== undefined) removeCgroup(group);
    rmSync(scratch, { recursive: true, force: true });
  }
}

interface RunCgroup {
  memoryDir: string;
  pidsDir: string;
  /** v1 freezer folder, or the v2 folder (cgroup.freeze / cgroup.kill live there). */
  freezerDir?: string | undefined;
  dirs: string[];
  procsFiles: string[];
  layout: CgroupLayout;
}

function createCgroup(
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
function setCgroupLimits(
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

function readOr(file: string, fallback = ''): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return fallback;
  }
}

/** Counters of limit hits so far. */
function limitHits(group: RunCgroup): { memory: boolean; pids: boolean } {
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
function killCgroup(group: RunCgroup, spare: number | undefined): boolean {
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

/** The init of a confined run's namespace: the one child of capsule's bwrap. */
function namespaceInits(wrapper: number): number[] {
  return readOr(`/proc/${wrapper}/task/${wrapper}/children`)
    .split(' ')
    .map(Number)
    .filter((n) => Number.isInteger(n) && n > 0);
}

/**
 * Resolves once no process is left in the run's cgroup (the namespace's processes die a moment after the
 * bwrap that capsule waited for), so a run's result means the run is gone; bounded, for a task stuck in
 * the kernel.
 */
async function drained(group: RunCgroup): Promise<void> {
  const procs = path.join(group.pidsDir, 'cgroup.procs');
  for (let i = 0; i < DRAIN_TRIES && readOr(procs).trim() !== ''; i++) {
    await new Promise((resolve) => setTimeout(resolve, DRAIN_POLL_MS));
  }
}

function removeCgroup(group: RunCgroup): boolean {
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

function removeLater(group: RunCgroup, tries: number): void {
  setTimeout(() => {
    if (!removeCgroup(group) && tries > 1) removeLater(group, tries - 1);
  }, 10).unref();
}

/** Empty cgroups left by a capsule that was killed before it could remove them. */
function sweepStaleCgroups(layout: CgroupLayout | undefined): void {
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

/** Signal the whole process group of a detached child (negative pid); ESRCH means it is gone. */
export function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

export interface HostProcessOptions {
  file: string;
  args: readonly string[];
  cwd: string;
  /** The whole environment of the process (nothing of capsule's own is added). */
  env: Record<string, string>;
  /** Written to stdin, then closed; stdin is /dev/null without it. */
  input?: string | undefined;
  /** Capture stdout/stderr (each capped at outputBytes), or pass them through to capsule's own. */
  output: 'capture' | 'inherit';
  outputBytes: number;
  /** Wall-clock limit; none when omitted (a person at a terminal stops it). */
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
  /** capsule's own state: read-only or hidden for the process, where the machine allows it. */
  protection?: HostProtection | undefined;
  memoryBytes?: number | undefined;
  pids?: number | undefined;
}

/** A runner's result fields (one shape for every host path), plus what only a host process reports. */
export interface HostProcessResult extends Omit<RunResult, 'environment' | 'pidsLimited'> {
  /** The pids limit refused a fork; the run was stopped. */
  pidsLimited: boolean;
  /** Whether this run had the namespaces (see HostConfinement). */
  confined: boolean;
  /** The process could not be started at all (missing program, EACCES): not a run result. */
  startError?: string | undefined;
}

/** What a run uses of its execa child (execa loads lazily, so its types are not imported). */
interface Child extends PromiseLike<{
  exitCode?: number | undefined;
  signal?: string | undefined;
  failed: boolean;
  shortMessage?: string | undefined;
  message: string;
}> {
  pid?: number | undefined;
  exitCode: number | null;
  signalCode: string | null;
  stdin: Writable | null;
  stdout: Readable | null;
  stderr: Readable | null;
  stdio: readonly unknown[];
  ref(): void;
  unref(): void;
  on(event: 'exit', listener: () => void): unknown;
}

/**
 * A confined init started before its call: its namespaces, cgroup and mounts set up, waiting on fd 3 for
 * the call's script. Used by exactly one call, then gone with it; killed when unused at close.
 */
interface Prestarted {
  key: string;
  child: Child;
  group: RunCgroup | undefined;
}

/** What a call's confinement is built from; a prestarted init serves only a call with the same key. */
interface ConfinedPlan {
  key: string;
  protection: { readOnly: string[]; hidden: string[]; sockets: string[]; pins: LinkPin[] };
}

/** Whether a child (and its pipes) keeps capsule's event loop alive: a waiting init does not. */
function hold(child: Child, keep: boolean): void {
  for (const handle of [child, ...child.stdio] as ({ ref?: () => void; unref?: () => void } | null)[]) {
    if (keep) handle?.ref?.();
    else handle?.unref?.();
  }
}

/** Hand bwrap its syscall filter on a pipe (it reads to the end, then closes its side). */
function sendFilter(child: Child, fd: number, program: Buffer | undefined): void {
  const pipe = child.stdio[fd] as Writable | undefined;
  if (pipe === undefined || program === undefined) return;
  pipe.on('error', () => {});
  pipe.end(program);
}

/**
 * Stop a run now, never with a grace period: its cgroup frozen and every process in it killed; without one,
 * the namespace's init killed (the kernel then kills every process of the namespace). capsule's bwrap then
 * exits by itself; `confined` false: the process group is killed.
 */
function stopRun(child: Child, group: RunCgroup | undefined, confined: boolean): void {
  const wrapper = child.pid;
  if (confined && wrapper !== undefined) {
    if (group !== undefined && killCgroup(group, wrapper)) return;
    const inits = namespaceInits(wrapper);
    for (const pid of inits) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    if (inits.length > 0) return;
  }
  killGroup(wrapper, 'SIGKILL');
}

/**
 * Spawn a run's first process: its own process group (one kill reaches every process that did not leave
 * it), exactly the environment given, and no descriptor of capsule's but `stdio` (shutInherited).
 * execa is loaded on the first host run: a process that starts none never pays for it.
 */
async function spawnChild(
  argv: { file: string; args: string[] },
  cwd: string,
  env: Record<string, string>,
  stdio: Parameters<typeof shutInherited>[0],
): Promise<{ child: Child }> {
  const { execa } = await import('execa');
  const io = shutInherited(stdio);
  try {
    // Wrapped: an async function returning the child bare would wait for its exit (it is a thenable).
    const child = execa(argv.file, argv.args, {
      cwd,
      env,
      extendEnv: false,
      detached: true,
      // A number is a descriptor of capsule's own, given to the child as is (node's spawn).
      stdio: io.stdio as unknown as readonly ['pipe', 'pipe', 'pipe', ...'pipe'[]],
      buffer: false,
      reject: false,
      stripFinalNewline: false,
      windowsHide: true,
    }) as unknown as Child;
    return { child };
  } finally {
    if (io.devNull !== undefined) closeSync(io.devNull);
  }
}

/** Starts host processes with the confinement measured once per instance (explicitly constructed). */
export class HostProcesses {
  private measured: HostConfinement | undefined;
  private readonly prestarted = new Map<string, Prestarted[]>();
  private readonly starting = new Map<string, number>();
  private filling: Promise<void> = Promise.resolve();
  private closed = false;
  private filter: Buffer | undefined | null = null;
  private ownCode: string[] | undefined;
  /** Calls that ran in a prestarted init (the isolation is the same; this says which start ran). */
  prestartedRuns = 0;

  private readonly prestartNext: boolean;

  /**
   * `prestart`: keep the next call's confined init ready (captured output only). Only for an owner that
   * calls close() (the shell runner): an init left waiting dies with capsule, but its cgroup would wait
   * for the next probe's sweep.
   */
  constructor(confinement?: HostConfinement, options: { prestart?: boolean } = {}) {
    this.measured = confinement;
    this.prestartNext = options.prestart ?? false;
  }

  /** What this machine gives host processes: probed on first use, then kept for this instance. */
  confinement(): HostConfinement {
    this.measured ??= probeHostConfinement();
    return this.measured;
  }

  /** The syscall filter's bytes, when the probe found it in force here. */
  private program(): Buffer | undefined {
    if (this.filter === null) this.filter = this.confinement().syscallFilter ? seccompProgram() : undefined;
    return this.filter;
  }

  /** Kill every prestarted init (nothing of them is left) and start no more. */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.prestarted.values()].flat();
    this.prestarted.clear();
    await Promise.all(all.map((p) => this.discard(p)));
  }

  async run(options: HostProcessOptions): Promise<HostProcessResult> {
    const started = performance.now();
    const result: HostProcessResult = {
      exitCode: null,
      signal: null,
      stdout: '',
      stderr: '',
      timedOut: false,
      canceled: false,
      truncated: false,
      oomKilled: false,
      pidsLimited: false,
      confined: false,
      durationMs: 0,
    };
    if (options.signal?.aborted) {
      result.canceled = true;
      return result;
    }
    const unreachable = startProblem(options.file, options.env.PATH, options.cwd);
    if (unreachable !== undefined) return { ...result, startError: unreachable };

    const conf = this.confinement();
    let argv = { file: options.file, args: [...options.args] };
    let group: RunCgroup | undefined;
    let child: Child | undefined;
    let plan: ConfinedPlan | undefined;
    let filterFd: number | undefined;
    if (conf.pidNamespace && conf.tools !== undefined) {
      // capsule's own code does not move while it runs: found once per instance.
      this.ownCode ??= ownCode();
      const protection = effectiveProtection(options.protection ?? NO_PROTECTION, this.ownCode);
      // Only captured output can be prestarted (an inherited terminal is the caller's, given at spawn).
      if (
        this.prestartNext &&
        options.output === 'capture' &&
        !options.file.startsWith('-') && // sh's exec takes no `--`
        Object.keys(options.env).every((k) => PLAIN_NAME.test(k))
      ) {
        plan = { key: JSON.stringify(protection), protection };
        const ready = this.take(plan.key);
        if (ready !== undefined) {
          try {
            // The limits are in place before the call's script reaches the init.
            if (ready.group !== undefined)
              setCgroupLimits(ready.group, { memoryBytes: options.memoryBytes, pids: options.pids });
            (ready.child.stdio[3] as Writable).end(callScript(options));
            ({ child, group } = ready);
            this.prestartedRuns++;
          } catch {
            void this.discard(ready);
          }
        }
      }
      if (child === undefined) {
        // Every confined run gets a cgroup where the machine has one: limits, and a stop that freezes.
        if (conf.cgroup !== undefined) {
          group = createCgroup(conf.cgroup, { memoryBytes: options.memoryBytes, pids: options.pids });
        }
        filterFd = this.program() === undefined ? undefined : 3;
        argv = confinedArgv(
          conf.tools,
          group,
          bwrapArgs(protection, filterFd, options.cwd, [options.file, ...options.args]),
        );
      }
      result.confined = true;
    }

    try {
      if (child === undefined) {
        child = (await this.start(argv, options, filterFd !== undefined)).child;
        if (filterFd !== undefined) sendFilter(child, filterFd, this.program());
      }
      await this.watch(child, options, result, group);
    } finally {
      // The namespace is gone once its init is; exiting tasks may take a moment to leave the cgroup,
      // so an empty cgroup is removed in the background rather than making the caller wait.
      if (group !== undefined && !removeCgroup(group)) removeLater(group, 40);
      // The next call of the same kind finds its init ready (a new one: nothing of this call is in
      // it), started once this call is done, so it does not compete with this call's command.
      if (plan !== undefined) this.prestartSoon(plan);
    }
    result.durationMs = performance.now() - started;
    return result;
  }

  /** A prestarted init for this key that is still alive (the oldest first; a dead one is discarded). */
  private take(key: string): Prestarted | undefined {
    const queue = this.prestarted.get(key) ?? [];
    for (let ready = queue.shift(); ready !== undefined; ready = queue.shift()) {
      if (ready.child.exitCode !== null || ready.child.signalCode !== null) {
        void this.discard(ready);
        continue;
      }
      hold(ready.child, true);
      return ready;
    }
    return undefined;
  }

  /** Prestarted inits of this key, waiting or being started. */
  private waiting(key: string): number {
    return (this.prestarted.get(key)?.length ?? 0) + (this.starting.get(key) ?? 0);
  }

  /** Fill this key's queue up to its depth (each init is started for a call to come, never reused). */
  private prestartSoon(plan: ConfinedPlan): void {
    this.filling = new Promise<void>((resolve) => {
      setImmediate(() => {
        const started: Promise<void>[] = [];
        while (!this.closed && this.waiting(plan.key) < PRESTART_DEPTH) {
          this.starting.set(plan.key, (this.starting.get(plan.key) ?? 0) + 1);
          started.push(
            this.prestart(plan)
              .catch(() => {
                // Not prestarted: the next call starts its init itself, as without prestarting.
              })
              .finally(() => this.starting.set(plan.key, (this.starting.get(plan.key) ?? 1) - 1)),
          );
        }
        void Promise.all(started).then(() => resolve());
      });
    });
  }

  /** Resolves once the inits the last call asked for are spawned (tests wait on it, not on a clock). */
  async prestarting(): Promise<void> {
    await this.filling;
  }

  /** Start a confined init exactly as a call would, minus the call: same namespaces, mounts and cgroup. */
  private async prestart(plan: ConfinedPlan): Promise<void> {
    const conf = this.confinement();
    if (conf.tools === undefined) return;
    // Limits are written when the call comes; until then the init only waits, inside capsule's own.
    const group = conf.cgroup !== undefined ? createCgroup(conf.cgroup, {}) : undefined;
    const program = this.program();
    let child: Child;
    try {
      const argv = confinedArgv(
        conf.tools,
        group,
        bwrapArgs(plan.protection, program === undefined ? undefined : 4, '/', [
          conf.tools.sh,
          '-c',
          WAIT_FOR_CALL,
        ]),
      );
      ({ child } = await spawnChild(argv, '/', {}, ['pipe', 'pipe', 'pipe', 'pipe', 'pipe']));
      sendFilter(child, 4, program);
    } catch (err) {
      if (group !== undefined) removeCgroup(group);
      throw err;
    }
    const ready: Prestarted = { key: plan.key, child, group };
    // A waiting init keeps no process alive: capsule may exit with it (it dies with capsule).
    hold(child, false);
    child.stdin?.on('error', () => {});
    (child.stdio[3] as Writable).on('error', () => {});
    const queue = this.prestarted.get(plan.key) ?? [];
    if (this.closed || queue.length >= PRESTART_DEPTH) {
      await this.discard(ready);
      return;
    }
    queue.push(ready);
    this.prestarted.set(plan.key, queue);
  }

  /** Kill a prestarted init that no call used, and remove its cgroup. */
  private async discard(ready: Prestarted): Promise<void> {
    stopRun(ready.child, ready.group, true);
    const wrapperKill = setTimeout(() => killGroup(ready.child.pid, 'SIGKILL'), WRAPPER_EXIT_MS);
    hold(ready.child, true); // awaited: its exit must keep the loop alive until it is gone
    await ready.child;
    clearTimeout(wrapperKill);
    if (ready.group === undefined) return;
    await drained(ready.group);
    // Exited tasks hold the cgroup until they are reaped (by the host's init, for a namespace's orphans).
    for (let i = 0; i < DRAIN_TRIES && !removeCgroup(ready.group); i++) {
      await new Promise((resolve) => setTimeout(resolve, DRAIN_POLL_MS));
    }
  }

  /** The child is wrapped: an async function returning it bare would wait for its exit (it is a thenable). */
  private async start(
    argv: { file: string; args: string[] },
    options: HostProcessOptions,
    filterPipe: boolean,
  ): Promise<{ child: Child }> {
    const capture = options.output === 'capture';
    return spawnChild(argv, options.cwd, options.env, [
      options.input === undefined ? 'ignore' : 'pipe',
      capture ? 'pipe' : 'inherit',
      capture ? 'pipe' : 'inherit',
      ...(filterPipe ? ['pipe' as const] : []),
    ]);
  }

  private async watch(
    child: Child,
    options: HostProcessOptions,
    result: HostProcessResult,
    group: RunCgroup | undefined,
  ): Promise<void> {
    let stopped = false;
    let wrapperKill: NodeJS.Timeout | undefined;
    // Once capsule decides the run is over, nothing of it runs another instruction (stopRun).
    const stop = (): void => {
      if (stopped) return;
      stopped = true;
      stopRun(child, group, result.confined);
      // capsule's own bwrap exits once its init is gone; should it not, it is killed too.
      wrapperKill = setTimeout(() => killGroup(child.pid, 'SIGKILL'), WRAPPER_EXIT_MS);
    };
    const onOverflow = (): void => {
      result.truncated = true;
      stop();
    };
    const stdout = new CappedOutput(options.outputBytes, onOverflow);
    const stderr = new CappedOutput(options.outputBytes, onOverflow);
    child.stdout?.on('data', (c: Buffer) => stdout.push(c));
    child.stderr?.on('data', (c: Buffer) => stderr.push(c));
    if (options.input !== undefined) {
      // A process that never reads stdin must not make us fail with EPIPE.
      child.stdin?.on('error', () => {});
      child.stdin?.end(options.input);
    } else {
      // A prestarted init always has a stdin pipe; its command reads /dev/null (callScript), as a fresh one.
      child.stdin?.end();
    }
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            result.timedOut = true;
            stop();
          }, options.timeoutMs);
    const onAbort = (): void => {
      result.canceled = true;
      stop();
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    // A limit hit stops the run, like an output overflow: the cgroup counters are polled.
    const limited = options.memoryBytes !== undefined || options.pids !== undefined;
    const poll =
      group === undefined || !limited
        ? undefined
        : setInterval(() => {
            const hits = limitHits(group);
            if (hits.memory || hits.pids) {
              result.oomKilled ||= hits.memory;
              result.pidsLimited ||= hits.pids;
              stop();
            }
          }, LIMIT_POLL_MS);
    // When the child exits, whatever is left in its group dies too (and releases the pipes).
    child.on('exit', () => killGroup(child.pid, 'SIGKILL'));

    const done = await child;
    clearTimeout(wrapperKill);
    if (group !== undefined) await drained(group);
    clearTimeout(timer);
    if (poll) clearInterval(poll);
    options.signal?.removeEventListener('abort', onAbort);
    if (group !== undefined && limited) {
      const hits = limitHits(group);
      result.oomKilled ||= hits.memory;
      result.pidsLimited ||= hits.pids;
    }
    if (
      done.failed &&
      done.exitCode === undefined &&
      done.signal === undefined &&
      !result.canceled &&
      !result.timedOut
    ) {
      result.startError = done.shortMessage ?? done.message;
      return;
    }
    // A run capsule stopped died of capsule's SIGKILL (bwrap would report it as 137, the init's status).
    result.exitCode = stopped ? null : (done.exitCode ?? null);
    result.signal = stopped ? 'SIGKILL' : (done.signal ?? null);
    result.stdout = stdout.text();
    result.stderr = stderr.text();
  }
}

/** Why `file` cannot start from `cwd` with this PATH (checked before spawning: inside the namespace a missing program is only an exit code). */
function startProblem(file: string, searchPath: string | undefined, cwd: string): string | undefined {
  const candidates = file.includes('/')
    ? [path.resolve(cwd, file)]
    : (searchPath ?? '')
        .split(':')
        .filter(Boolean)
        .map((d) => path.join(path.resolve(cwd, d), file));
  for (const c of candidates) {
    try {
      accessSync(c, fsConstants.X_OK);
      return undefined;
    } catch {
      // next
    }
  }
  return file.includes('/')
    ? `${file} is not an executable file`
    : `${file} was not found on PATH (${searchPath ?? ''})`;
}
