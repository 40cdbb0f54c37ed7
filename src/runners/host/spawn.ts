import { accessSync, closeSync, constants as fsConstants, openSync, readdirSync } from 'node:fs';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { killCgroup, type RunCgroup } from './cgroups.js';
import { readOr } from './read-or.js';

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

/** Signal the whole process group of a detached child (negative pid); ESRCH means it is gone. */
export function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

/** What a run uses of its execa child (execa loads lazily, so its types are not imported). */
export interface Child extends PromiseLike<{
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

/** Whether a child (and its pipes) keeps capsule's event loop alive: a waiting init does not. */
export function hold(child: Child, keep: boolean): void {
  for (const handle of [child, ...child.stdio] as ({ ref?: () => void; unref?: () => void } | null)[]) {
    if (keep) handle?.ref?.();
    else handle?.unref?.();
  }
}

/** Hand bwrap its syscall filter on a pipe (it reads to the end, then closes its side). */
export function sendFilter(child: Child, fd: number, program: Buffer | undefined): void {
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
export function stopRun(child: Child, group: RunCgroup | undefined, confined: boolean): void {
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
export async function spawnChild(
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

/** The init of a confined run's namespace: the one child of capsule's bwrap. */
function namespaceInits(wrapper: number): number[] {
  return readOr(`/proc/${wrapper}/task/${wrapper}/children`)
    .split(' ')
    .map(Number)
    .filter((n) => Number.isInteger(n) && n > 0);
}

/** Why `file` cannot start from `cwd` with this PATH (checked before spawning: inside the namespace a missing program is only an exit code). */
export function startProblem(file: string, searchPath: string | undefined, cwd: string): string | undefined {
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
