import type { Writable } from 'node:stream';
import type { HostProtection } from '../../project/protected-state.js';
import { CappedOutput } from '../capped-output.js';
import { seccompProgram } from '../seccomp.js';
import { finishedRun, type RunResult } from '../types.js';
import { singleQuoted } from '../../base/shell-quote.js';
import { bwrapArgs, confinedArgv } from './bwrap.js';
import {
  createCgroup,
  DRAIN_POLL_MS,
  DRAIN_TRIES,
  drained,
  limitHits,
  removeCgroup,
  removeLater,
  setCgroupLimits,
  type RunCgroup,
} from './cgroups.js';
import { probeHostConfinement, type HostConfinement } from './confinement.js';
import { effectiveProtection, NO_PROTECTION, ownCode, type RunProtection } from './protection.js';
import { hold, killGroup, sendFilter, spawnChild, startProblem, stopRun, type Child } from './spawn.js';

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

const LIMIT_POLL_MS = 25;
/** Confined inits kept ready per kind of call: back-to-back calls find one whose set-up is done. */
const PRESTART_DEPTH = 2;

/** How long capsule's bwrap has to exit once its namespace is killed, before it is killed too. */
const WRAPPER_EXIT_MS = 2000;

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
  protection: RunProtection;
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
    const result: HostProcessResult = { ...finishedRun(), pidsLimited: false, confined: false };
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
