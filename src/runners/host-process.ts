import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import {
  accessSync,
  constants as fsConstants,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import { CappedOutput } from './capped-output.js';
import { isPrivateFolder } from './private-folder.js';
import type { RunResult } from './types.js';
import { singleQuoted } from '../shell-quote.js';
import { processAlive } from './process-alive.js';

/**
 * The one way capsule starts a host process (shell capabilities, the agent's run_command, `capsule exec`).
 *
 * Where the machine allows it (util-linux `setpriv`, `unshare` and `mount`, and root or unprivileged user
 * namespaces), the process runs as the init of a fresh pid namespace with its own /proc:
 *  - nothing outlives the run: when the init exits or is killed, the kernel kills every process of the
 *    namespace (setsid, double fork, nohup, disown and detached spawns included);
 *  - the namespace dies with capsule: `setpriv --pdeathsig KILL` makes `unshare` die with capsule, and
 *    `unshare --kill-child` takes the init with it;
 *  - capsule's own environment and command line are not readable: the fresh /proc lists only the run;
 *  - capsule's protected state is mounted read-only (and every ancestor of it is made a mount point, so
 *    the tree holding it cannot be renamed away and replaced), and the process cannot undo that: it runs
 *    without CAP_SYS_ADMIN and the other capabilities that reach around mounts;
 *  - memory and pids limits are a cgroup of their own, polled for hits.
 * Elsewhere it falls back to a detached process group that is killed as a whole, and says so through
 * {@link HostConfinement}, which is measured by a probe, never assumed.
 */

/** Fixed locations of the tools confinement needs; never looked up on a caller's PATH. */
const SYSTEM_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin'];
/** Capabilities the confined process loses: each could undo the read-only mounts or reach outside the run. */
const DROPPED_CAPS = ['sys_admin', 'sys_module', 'sys_rawio', 'sys_ptrace', 'mknod', 'sys_boot'];
const LIMIT_POLL_MS = 25;
/** Confined inits kept ready per kind of call: back-to-back calls find one whose set-up is done. */
const PRESTART_DEPTH = 2;

/** What confinement host processes get on this machine, as measured by {@link probeHostConfinement}. */
export interface HostConfinement {
  /** The namespaces are owned by an unprivileged user namespace (capsule is not root). */
  userNamespace: boolean;
  /** Own pid namespace and /proc: nothing outlives the run, capsule's environment is not visible. */
  pidNamespace: boolean;
  /** The namespace is killed when capsule dies (even by SIGKILL). */
  diesWithCapsule: boolean;
  /** Protected paths are mounted read-only and the process cannot remount them. */
  readOnlyPaths: boolean;
  /** limits.memoryMb is enforced (a cgroup of the run's own). */
  memoryLimit: boolean;
  /** limits.pids is enforced (a cgroup of the run's own). */
  pidsLimit: boolean;
  /** Why something above is missing (empty when everything holds). */
  missing: string[];
  /** Resolved tools (absolute paths) when pidNamespace holds. */
  tools?: { setpriv: string; unshare: string; mount: string; sh: string } | undefined;
  /** How limits are enforced here, when they are. */
  cgroup?: CgroupLayout | undefined;
}

/** Where a run's cgroup is created, per controller. */
export interface CgroupLayout {
  version: 1 | 2;
  /** Parent folders the run's own cgroup is created in: v1 one per controller, v2 one for both. */
  memoryParent: string;
  pidsParent: string;
}

/** One line for the isolation report and `capsule show`. */
export function describeConfinement(c: HostConfinement): string {
  if (!c.pidNamespace) {
    return `unconfined host process (${c.missing.join('; ')}): a process that leaves its group can outlive the run and read capsule's environment through /proc`;
  }
  const parts = [
    `own pid namespace and /proc${c.userNamespace ? ' (in a user namespace)' : ''} (nothing outlives the run; capsule’s environment not visible)`,
  ];
  if (c.diesWithCapsule) parts.push('dies with capsule');
  parts.push(c.readOnlyPaths ? "capsule's state read-only" : "capsule's state writable");
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
    return { version: 1, memoryParent: memory, pidsParent: pids };
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

/** The protected paths that exist, outermost only (a path inside another is covered by it). */
function mountTargets(paths: readonly string[]): string[] {
  const existing = [...new Set(paths.map((p) => path.resolve(p)))].filter((p) => existsSync(p)).sort();
  return existing.filter((p, i) => !existing.slice(0, i).some((q) => p.startsWith(q + path.sep)));
}

/**
 * The script the namespace's init runs before it becomes the command: join the run's cgroup(s), make
 * the ancestors of every protected path mount points (a mount point cannot be renamed), mount the
 * protected paths read-only, then exec the command without the capabilities that could undo it.
 */
/** An fstab field: whitespace and backslashes as octal escapes, as libmount reads them. */
function fstabField(p: string): string {
  return p.replace(/[\\\s]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);
}

/** Mount points of capsule's own mount namespace (a bind entry on one of them would be skipped by mount -a). */
function mountPoints(): Set<string> {
  try {
    const lines = readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
    return new Set(
      lines
        .map((l) => l.split(' ')[4])
        .filter((m): m is string => m !== undefined)
        .map((m) => m.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)))),
    );
  } catch {
    return new Set();
  }
}

/**
 * The mounts of a run as one fstab, so the init mounts them with a single `mount -a` (one exec instead
 * of one per path): the ancestors of every protected path become mount points (a mount point cannot be
 * renamed), then each protected path is bound read-only onto itself.
 */
function mountTable(
  readOnly: readonly string[],
  mounted: ReadonlySet<string>,
): { fstab: string; explicit: string[] } {
  const roots = [...new Set(readOnly.flatMap((p) => ancestors(p)))].filter(
    (d) => d !== '/' && !mounted.has(d),
  );
  const lines = roots.map((d) => `${fstabField(d)} ${fstabField(d)} none rbind 0 0`);
  const explicit: string[] = [];
  for (const p of readOnly) {
    if (mounted.has(p)) explicit.push(p);
    else lines.push(`${fstabField(p)} ${fstabField(p)} none bind,ro 0 0`);
  }
  return { fstab: lines.length > 0 ? `${lines.join('\n')}\n` : '', explicit };
}

/**
 * The script the namespace's init runs before it becomes the command: join the run's cgroup(s), mount
 * the table (ancestors as mount points, protected paths read-only), then exec the command without the
 * capabilities that could undo it.
 */
function initScript(
  tools: NonNullable<HostConfinement['tools']>,
  cgroupProcs: readonly string[],
  mounts: { fstabFile?: string | undefined; explicit: readonly string[] },
  cwd: string | 'prestarted',
): string {
  const lines = ['set -e'];
  for (const procs of cgroupProcs) lines.push(`echo 0 > ${singleQuoted(procs)}`);
  if (mounts.fstabFile !== undefined) lines.push(`${tools.mount} -a -T ${singleQuoted(mounts.fstabFile)}`);
  for (const p of mounts.explicit)
    lines.push(`${tools.mount} --bind -o ro ${singleQuoted(p)} ${singleQuoted(p)}`);
  const drop = DROPPED_CAPS.map((c) => `-${c}`).join(',');
  if (cwd === 'prestarted') {
    // Confined, without the capabilities, and waiting: the call's own script (see callScript) arrives
    // on fd 3, whole, at call time, so the call costs one exec, its command's. `read` keeps every byte
    // of a line (IFS empty, -r); the loop ends when capsule closes the pipe.
    const wait = ['s=', 'while IFS= read -r l <&3; do s="$s$l', '"; done', 'exec 3<&-', 'eval "$s"'];
    lines.push(
      `exec ${tools.setpriv} --bounding-set ${drop} -- ${tools.sh} -c ${singleQuoted(wait.join('\n'))}`,
    );
    return lines.join('\n');
  }
  // The inherited cwd still points into the mounts as they were; enter it again through the new ones.
  // (`cd` would export OLDPWD into the command's environment, which must be exactly what was given.)
  if (mounts.fstabFile !== undefined || mounts.explicit.length > 0)
    lines.push(`cd ${singleQuoted(cwd)}`, 'unset OLDPWD');
  lines.push(`exec ${tools.setpriv} --bounding-set ${drop} -- "$@"`);
  return lines.join('\n');
}

/**
 * Where mount tables live: one folder per user, itself mounted read-only in every run, so no confined
 * process can rewrite the table a later run mounts from.
 */
function mountTableDir(): string {
  return path.join(tmpdir(), `capsule-mounts-${process.getuid?.() ?? 'user'}`);
}

/** The file holding `fstab` in mountTableDir, named by content, so runs share them. */
function mountTableFile(fstab: string): string {
  const dir = mountTableDir();
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const st = lstatSync(dir);
  if (!isPrivateFolder(st, process.getuid?.())) {
    throw new Error(`${dir} is not a private folder of this user`);
  }
  const file = path.join(dir, `${createHash('sha256').update(fstab).digest('hex').slice(0, 32)}.fstab`);
  let current: string | undefined;
  try {
    current = readFileSync(file, 'utf8');
  } catch {
    current = undefined;
  }
  if (current !== fstab) {
    const temp = `${file}.${randomBytes(6).toString('hex')}`;
    writeFileSync(temp, fstab, { mode: 0o600 });
    renameSync(temp, file);
  }
  return file;
}

function runMounts(
  readOnly: readonly string[],
  hideCgroups: boolean,
): { fstabFile?: string | undefined; explicit: string[] } {
  if (readOnly.length === 0 && !hideCgroups) return { explicit: [] };
  const dir = mountTableDir();
  const table = mountTable([dir, ...readOnly], mountPoints());
  // Root may write cgroupfs: the run would leave its cgroup or raise its own limits. An empty read-only
  // tmpfs hides every hierarchy once the init has joined (its own name, or mount -a takes it as mounted).
  const fstab = hideCgroups
    ? `${table.fstab}capsule-no-cgroups /sys/fs/cgroup tmpfs ro,size=4k,mode=555 0 0\n`
    : table.fstab;
  const { explicit } = table;
  return { fstabFile: fstab === '' ? undefined : mountTableFile(fstab), explicit };
}

/** A variable name `export` takes as is (anything else is started the fresh way, never rewritten). */
const PLAIN_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * What a prestarted init evaluates when its call comes: exactly the call's environment (the init itself
 * started with none), its cwd entered through the run's mounts, stdin /dev/null when no input is given,
 * then the command.
 */
function callScript(options: Pick<HostProcessOptions, 'file' | 'args' | 'cwd' | 'env' | 'input'>): string {
  const lines = Object.entries(options.env).map(([k, v]) => `export ${singleQuoted(`${k}=${v}`)}`);
  lines.push(`cd ${singleQuoted(options.cwd)}`, 'unset OLDPWD');
  if (options.input === undefined) lines.push('exec </dev/null');
  // The init already runs without the dropped capabilities (initScript): the command is exec'd as is.
  lines.push(`exec ${[options.file, ...options.args].map(singleQuoted).join(' ')}`);
  return `${lines.join('\n')}\n`;
}

function confinedArgv(
  tools: NonNullable<HostConfinement['tools']>,
  userNamespace: boolean,
  script: string,
  file: string,
  args: readonly string[],
): { file: string; args: string[] } {
  return {
    file: tools.setpriv,
    args: [
      // setpriv fails rather than run without it, so a started run always dies with capsule.
      '--pdeathsig',
      'KILL',
      '--',
      tools.unshare,
      // Without root: an unprivileged user namespace owns the new pid and mount namespaces.
      ...(userNamespace ? ['--user', '--map-root-user'] : []),
      '--fork',
      '--pid',
      '--mount-proc',
      '--kill-child',
      '--',
      tools.sh,
      '-c',
      script,
      'capsule-init',
      file,
      ...args,
    ],
  };
}

/**
 * Measure what confinement works here by running it: a pid namespace whose init is pid 1 and sees no
 * other process, a read-only mount the process cannot write or remount, and a cgroup that takes limits.
 * Synchronous (one short process, a few ms) so the isolation report can be built from it.
 */
export function probeHostConfinement(options: { toolDirs?: readonly string[] } = {}): HostConfinement {
  const missing: string[] = [];
  const result: HostConfinement = {
    userNamespace: false,
    pidNamespace: false,
    diesWithCapsule: false,
    readOnlyPaths: false,
    memoryLimit: false,
    pidsLimit: false,
    missing,
  };
  if (process.platform !== 'linux') {
    missing.push(`no Linux namespaces on ${process.platform}`);
    return result;
  }
  const dirs = options.toolDirs ?? SYSTEM_DIRS;
  const tools = {
    setpriv: findTool('setpriv', dirs),
    unshare: findTool('unshare', dirs),
    mount: findTool('mount', dirs),
    sh: findTool('sh', dirs),
  };
  const absent = Object.entries(tools)
    .filter(([, v]) => v === undefined)
    .map(([k]) => k);
  if (absent.length > 0) {
    missing.push(`${absent.join(', ')} not installed (util-linux)`);
    return result;
  }
  const found = tools as NonNullable<HostConfinement['tools']>;
  const layout = cgroupLayout();
  sweepStaleCgroups(layout);
  const scratch = mkdtempSync(path.join(tmpdir(), 'capsule-probe-'));
  let group: RunCgroup | undefined;
  try {
    const file = path.join(scratch, 'protected');
    writeFileSync(file, 'x');
    try {
      if (layout !== undefined) group = createCgroup(layout, { memoryBytes: 64 * 1024 * 1024, pids: 16 });
    } catch {
      group = undefined;
    }
    // Inside: am I pid 1 alone, is the file read-only even for root, can I remount it (I must not)?
    const f = singleQuoted(file);
    const check = [
      'test "$$" = 1 || echo not-pid-1',
      // A fresh /proc lists only this namespace: a handful of pids, not the machine's.
      'n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; [ "$n" -le 4 ] || echo host-proc',
      // Undo the read-only mount every way a process would try, then write.
      `${found.mount} -o remount,bind,rw ${f} 2>/dev/null; ${found.mount} --make-private ${f} 2>/dev/null`,
      `umount ${f} 2>/dev/null; ( echo y > ${f} ) 2>/dev/null && echo writable`,
      // With limits, the cgroup hierarchies must be out of reach (a run could leave or raise its own).
      '[ -z "$(ls -A /sys/fs/cgroup 2>/dev/null)" ] || echo cgroups-visible',
      'echo probe-ran',
    ].join('\n');
    const attempt = (userNs: boolean): SpawnSyncReturns<string> => {
      const argv = confinedArgv(
        found,
        userNs,
        initScript(
          found,
          userNs ? [] : (group?.procsFiles ?? []),
          runMounts([file], group !== undefined && !userNs),
          scratch,
        ),
        found.sh,
        ['-c', check],
      );
      return spawnSync(argv.file, argv.args, {
        encoding: 'utf8',
        env: { PATH: '/usr/bin:/bin' },
        timeout: 5000,
      });
    };
    let r = attempt(false);
    if (!(r.stdout ?? '').includes('probe-ran')) {
      // Not root: an unprivileged user namespace may still give the pid and mount namespaces.
      const viaUser = attempt(true);
      if ((viaUser.stdout ?? '').includes('probe-ran')) {
        r = viaUser;
        result.userNamespace = true;
        if (group !== undefined) removeCgroup(group);
        group = undefined;
      }
    }
    const out = r.stdout ?? '';
    if (!out.includes('probe-ran')) {
      const why = (r.stderr ?? '').trim().split('\n').pop() ?? '';
      missing.push(
        `no pid/mount namespaces here (${why || r.error?.message || `exit ${r.status}`}; needs root or user namespaces)`,
      );
      return result;
    }
    result.pidNamespace = !out.includes('not-pid-1') && !out.includes('host-proc');
    if (!result.pidNamespace) missing.push('the namespace init is not pid 1 or /proc shows the host');
    result.diesWithCapsule = result.pidNamespace;
    result.readOnlyPaths =
      result.pidNamespace && !out.includes('writable') && readFileSync(file, 'utf8') === 'x';
    if (!result.readOnlyPaths) missing.push('protected paths could not be made read-only');
    if (group !== undefined && result.pidNamespace && !out.includes('cgroups-visible')) {
      result.memoryLimit = true;
      result.pidsLimit = true;
      result.cgroup = layout;
    } else {
      missing.push(
        layout === undefined
          ? 'no cgroup with memory and pids controllers capsule may create'
          : 'cgroup limits could not be set',
      );
    }
    result.tools = found;
    return result;
  } finally {
    if (group !== undefined) removeCgroup(group);
    rmSync(scratch, { recursive: true, force: true });
  }
}

interface RunCgroup {
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
  const dirs = [...new Set([memoryDir, pidsDir])];
  for (const d of dirs) mkdirSync(d);
  const group: RunCgroup = { dirs, procsFiles: dirs.map((d) => path.join(d, 'cgroup.procs')), layout };
  try {
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
  const { layout } = group;
  const [memoryDir, pidsDir] = [group.dirs[0] as string, group.dirs[group.dirs.length - 1] as string];
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
function limitHits(group: RunCgroup): { memory: boolean; pids: boolean } {
  const read = (f: string): string => {
    try {
      return readFileSync(f, 'utf8');
    } catch {
      return '';
    }
  };
  const [memoryDir, pidsDir] = [group.dirs[0] as string, group.dirs[group.dirs.length - 1] as string];
  const memory =
    group.layout.version === 1
      ? /\boom_kill [1-9]/.test(read(path.join(memoryDir, 'memory.oom_control')))
      : /\boom_kill [1-9]/.test(read(path.join(memoryDir, 'memory.events')));
  const pids = /\bmax [1-9]/.test(read(path.join(pidsDir, 'pids.events')));
  return { memory, pids };
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
  for (const parent of new Set([layout.memoryParent, layout.pidsParent])) {
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
  /** SIGTERM first, SIGKILL this long after (a stop always ends in SIGKILL). */
  killGraceMs: number;
  signal?: AbortSignal | undefined;
  /** Paths the process must not change (capsule's own state); mounted read-only where possible. */
  readOnlyPaths?: readonly string[] | undefined;
  memoryBytes?: number | undefined;
  pids?: number | undefined;
}

/** A runner's result fields (one shape for every host path), plus what only a host process reports. */
export interface HostProcessResult extends Omit<RunResult, 'environment' | 'pidsLimited'> {
  /** The pids limit refused a fork; the run was stopped. */
  pidsLimited: boolean;
  /** Whether this run had the pid namespace (see HostConfinement). */
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
 * A confined init started before its call: its namespace, cgroup and mounts set up, waiting on fd 3 for
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
  readOnly: string[];
  limited: boolean;
}

/** Whether a child (and its pipes) keeps capsule's event loop alive: a waiting init does not. */
function hold(child: Child, keep: boolean): void {
  for (const handle of [child, ...child.stdio] as ({ ref?: () => void; unref?: () => void } | null)[]) {
    if (keep) handle?.ref?.();
    else handle?.unref?.();
  }
}

/** Starts host processes with the confinement measured once per instance (explicitly constructed). */
export class HostProcesses {
  private measured: HostConfinement | undefined;
  private readonly prestarted = new Map<string, Prestarted[]>();
  private readonly starting = new Map<string, number>();
  private filling: Promise<void> = Promise.resolve();
  private closed = false;
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
    if (conf.pidNamespace && conf.tools !== undefined) {
      const wantsLimits = options.memoryBytes !== undefined || options.pids !== undefined;
      const readOnly = conf.readOnlyPaths ? mountTargets(options.readOnlyPaths ?? []) : [];
      const limited = wantsLimits && conf.cgroup !== undefined;
      // Only captured output can be prestarted (an inherited terminal is the caller's, given at spawn).
      if (
        this.prestartNext &&
        options.output === 'capture' &&
        !options.file.startsWith('-') && // sh's exec takes no `--`
        Object.keys(options.env).every((k) => PLAIN_NAME.test(k))
      ) {
        plan = { key: JSON.stringify([readOnly, limited]), readOnly, limited };
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
        if (limited && conf.cgroup !== undefined) {
          group = createCgroup(conf.cgroup, { memoryBytes: options.memoryBytes, pids: options.pids });
        }
        argv = confinedArgv(
          conf.tools,
          conf.userNamespace,
          initScript(
            conf.tools,
            group?.procsFiles ?? [],
            runMounts(readOnly, group !== undefined),
            options.cwd,
          ),
          options.file,
          options.args,
        );
      }
      result.confined = true;
    }

    try {
      child ??= (await this.start(argv, options)).child;
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
    const group = plan.limited && conf.cgroup !== undefined ? createCgroup(conf.cgroup, {}) : undefined;
    let child: Child;
    try {
      const argv = confinedArgv(
        conf.tools,
        conf.userNamespace,
        initScript(
          conf.tools,
          group?.procsFiles ?? [],
          runMounts(plan.readOnly, group !== undefined),
          'prestarted',
        ),
        'prestarted',
        [],
      );
      const { execa } = await import('execa');
      child = execa(argv.file, argv.args, {
        cwd: '/',
        env: {},
        extendEnv: false,
        detached: true,
        stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
        buffer: false,
        reject: false,
        stripFinalNewline: false,
        windowsHide: true,
      }) as unknown as Child;
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
    killGroup(ready.child.pid, 'SIGKILL');
    hold(ready.child, true); // awaited: its exit must keep the loop alive until it is gone
    await ready.child;
    if (ready.group !== undefined && !removeCgroup(ready.group)) removeLater(ready.group, 40);
  }

  /** The child is wrapped: an async function returning it bare would wait for its exit (it is a thenable). */
  private async start(
    argv: { file: string; args: string[] },
    options: HostProcessOptions,
  ): Promise<{ child: Child }> {
    const capture = options.output === 'capture';
    // Loaded on the first host run: a process that starts none never pays for execa.
    const { execa } = await import('execa');
    const child = execa(argv.file, argv.args, {
      cwd: options.cwd,
      env: options.env,
      extendEnv: false,
      detached: true, // own process group: one kill reaches every process that did not leave it
      stdin: options.input === undefined ? 'ignore' : 'pipe',
      stdout: capture ? 'pipe' : 'inherit',
      stderr: capture ? 'pipe' : 'inherit',
      buffer: false,
      reject: false,
      stripFinalNewline: false,
      windowsHide: true,
    }) as unknown as Child;
    return { child };
  }

  private async watch(
    child: Child,
    options: HostProcessOptions,
    result: HostProcessResult,
    group: RunCgroup | undefined,
  ): Promise<void> {
    let escalation: NodeJS.Timeout | undefined;
    const kill = (): void => killGroup(child.pid, 'SIGKILL');
    const stop = (): void => {
      killGroup(child.pid, 'SIGTERM');
      escalation ??= setTimeout(kill, options.killGraceMs);
    };
    const onOverflow = (): void => {
      result.truncated = true;
      kill();
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
    const poll =
      group === undefined
        ? undefined
        : setInterval(() => {
            const hits = limitHits(group);
            if (hits.memory || hits.pids) {
              result.oomKilled ||= hits.memory;
              result.pidsLimited ||= hits.pids;
              kill();
            }
          }, LIMIT_POLL_MS);
    // When the child exits, whatever is left in its group dies too (and releases the pipes).
    child.on('exit', kill);

    const done = await child;
    clearTimeout(timer);
    if (escalation) clearTimeout(escalation);
    if (poll) clearInterval(poll);
    options.signal?.removeEventListener('abort', onAbort);
    if (group !== undefined) {
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
    result.exitCode = done.exitCode ?? null;
    result.signal = done.signal ?? null;
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
