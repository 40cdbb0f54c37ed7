import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { CapsuleError } from '../../base/errors.js';
import type { Capability } from '../../manifest/types.js';
import {
  WATCHDOG_GRACE_MS,
  finishedOutcome,
  seconds,
  watchPids,
  type CallOutcome,
  type KilledBy,
  type WatchdogTools,
} from './call.js';
import { OutputDemuxer } from './demux.js';
import { engineMessage } from './engine.js';
import type { ContainerSpec, DockerEngine } from './engine.js';
import { frame, FrameSplitter } from './attach-frames.js';
import { KEEPALIVE_OUTPUT_BYTES, keepaliveSpec } from './keepalive.js';
import { containerPidsHits } from './pids-events.js';

/** A warm container is retired after this many calls, bounding how long one container serves. */
const MAX_USES = 50;
/** No call starts in a warm container with less lifetime left than its timeout plus this. */
const LIFE_MARGIN_MS = 2000;
/** How long the keep-alive and the check may take before the reset counts as failed. */
const RESET_TIMEOUT_MS = 2000;
/** Lines of `text` that are exactly `line`. */
function lineCount(text: string, line: string): number {
  return text.split('\n').filter((l) => l === line).length;
}

export interface ExecPoolOptions {
  /** How long a warm container lives at most (its own deadline, held inside it). Default 300000. */
  lifeMs?: number | undefined;
  /** Containers per configuration at most: calls in flight, resetting, starting and idle. Default 8. */
  maxPerKey?: number | undefined;
  /** An idle container unused this long is removed (the pool shrinks back when calls stop). Default 15000. */
  idleMs?: number | undefined;
  /**
   * Tests only, never set by capsule: the keep-alive runs as the call user with no added capability (the
   * separation between PID 1 and the calls switched off), so attack tests can show what it defends against.
   */
  keepaliveAsCallUser?: boolean | undefined;
  /** Tests only, never set by capsule: PID 1 runs from a readable file, so it stays dumpable. */
  keepaliveDumpable?: boolean | undefined;
}

interface Warm {
  id: string;
  /** Host pid of its PID 1 (the keep-alive), as the engine listed it right after the start. */
  initPid: number;
  uses: number;
  startedAt: number;
  /** Its own lifetime (held inside it by the keep-alive). */
  lifeMs: number;
  /** Held open for the container's life: closing it (or capsule dying) ends the container. */
  stdin: Duplex;
  /** The keep-alive's own output (reset acknowledgements), and anything written between calls. */
  output: OutputDemuxer;
  /** The call in progress: receives every frame of the container's output while it runs. */
  sink?: ((type: number, payload: Buffer) => void) | undefined;
  dead: boolean;
  /** Removes it when it stays idle too long. */
  idleTimer?: NodeJS.Timeout | undefined;
}

interface Waiter {
  timeoutMs: number;
  resolve: (warm: Warm) => void;
  reject: (err: unknown) => void;
}

interface KeyState {
  spec: ContainerSpec;
  tools: WatchdogTools;
  idle: Warm[];
  waiters: Waiter[];
  /** Containers being started or reset for this key: each becomes available (or fails) soon. */
  coming: number;
  busy: number;
  /** How many to keep ready: grows when a call finds none ready, shrinks when they sit idle. */
  target: number;
  /** Calls that got a container so far. */
  served: number;
}

/** Why a call did not get a container: it was canceled while it waited. */
class WaitCanceled extends Error {}

/**
 * Warm containers for capabilities marked `docker.reusable`: calls run in a running hardened container
 * (forked by its keep-alive, no runtime exec) instead of a fresh one, and the container is RESET and VERIFIED
 * between calls (KEEPALIVE_SCRIPT) by a keep-alive no call can reach (root with three capabilities; calls run
 * as the spec's user with none): every process but its init killed, /tmp, /dev/shm and /dev/mqueue wiped,
 * SysV IPC and unix sockets none (the container's private IPC namespace has kernel.shm_rmid_forced, so a
 * segment goes with its last process); its environment and working directory come from the spec on every
 * call. A container whose reset cannot be verified is removed, never reused (fail closed). The hardening (no
 * network, read-only rootfs, limits) is the same as for fresh containers; a timed-out, canceled, flooding or
 * OOM-killed call retires its container. Containers are started ahead as demand shows (a call that finds none
 * ready raises the count kept ready, bounded by maxPerKey) and removed again when they sit idle; resets run
 * after the result is returned.
 */
export class ExecPool {
  private readonly engine: DockerEngine;
  private readonly keys = new Map<string, KeyState>();
  private readonly busy = new Set<string>();
  private readonly pending = new Set<Promise<unknown>>();
  private readonly lifeMs: number;
  private readonly maxPerKey: number;
  private readonly idleMs: number;
  private readonly keepaliveAsCallUser: boolean;
  private readonly keepaliveDumpable: boolean;
  private closed = false;

  constructor(engine: DockerEngine, options: ExecPoolOptions = {}) {
    this.engine = engine;
    this.lifeMs = options.lifeMs ?? 300_000;
    this.maxPerKey = Math.max(1, options.maxPerKey ?? 8);
    this.idleMs = options.idleMs ?? 15_000;
    this.keepaliveAsCallUser = options.keepaliveAsCallUser === true;
    this.keepaliveDumpable = options.keepaliveDumpable === true;
  }

  /** Whether a spec can be reset at all: kill -9 -1 and the IPC check need the container's own namespaces. */
  static resettable(spec: ContainerSpec): boolean {
    return spec.pidMode !== 'host' && spec.ipcMode !== 'host';
  }

  async run(
    key: string,
    spec: ContainerSpec,
    capability: Capability,
    input: string,
    signal: AbortSignal | undefined,
    tools: WatchdogTools,
  ): Promise<CallOutcome> {
    const limits = capability.manifest.limits;
    const canceled: CallOutcome = {
      exitCode: null,
      signal: null,
      stdout: '',
      stderr: '',
      timedOut: false,
      canceled: true,
      truncated: false,
      oomKilled: false,
      started: false,
    };
    if (signal?.aborted === true) return canceled;
    let warm: Warm;
    try {
      warm = await this.take(key, spec, tools, limits.timeoutMs, signal);
    } catch (err) {
      if (err instanceof WaitCanceled) return canceled;
      throw err;
    }
    // Counted busy from its handover on (take/offer), so supply() never sees it missing.
    const state = this.stateFor(key, spec, tools);
    this.busy.add(warm.id);
    let retire = false;
    let killedBy: KilledBy;
    const kill = (why: Exclude<KilledBy, undefined>): void => {
      if (killedBy !== undefined) return;
      killedBy = why;
      retire = true;
      // docker cannot kill one exec: the container goes, with everything in it.
      this.engine.kill(warm.id).catch(() => {});
    };
    // The container's counter spans its earlier calls: only refusals past the count before this one are its.
    const hits = this.engine.pidsHits === undefined ? undefined : containerPidsHits(warm.initPid, warm.id);
    const pids = watchPids(hits, () => kill('pids'), hits?.() ?? 0);
    const demux = new OutputDemuxer(limits.outputBytes, () => kill('overflow'));
    const timer = setTimeout(() => kill('timeout'), limits.timeoutMs);
    const onAbort = (): void => kill('abort');
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const code = await this.runInKeepalive(warm, input, limits.timeoutMs + WATCHDOG_GRACE_MS, demux);
      // The container lives on after the exec: its counter is still there to read.
      pids.check();
      pids.stop();
      // Killed by us, or the container ended: it is not reused either way.
      if (code === null) retire = true;
      let oomKilled = false;
      if (killedBy === undefined && code === 137) {
        // The engine sets State.OOMKilled only when a container exits, not for one process in it, so
        // ask the container's memory cgroup (v1 memory.oom_control, v2 memory.events) for its OOM kills.
        // A warm container is retired after any OOM, so a non-zero count is this call's.
        oomKilled = (await this.oomKills(warm.id, spec, tools)) > 0;
        retire = true;
      }
      return finishedOutcome(code, killedBy, oomKilled, demux);
    } finally {
      pids.stop();
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      this.busy.delete(warm.id);
      state.busy--;
      warm.uses++;
      if (retire || this.closed || warm.dead || warm.uses >= MAX_USES) {
        this.discard(warm);
        this.supply(state);
      } else {
        // Off the result's path: the next call takes another ready container meanwhile, or waits for this one.
        state.coming++;
        this.track(
          this.reset(warm).then((clean) => {
            state.coming--;
            if (clean) this.offer(state, warm);
            else {
              this.discard(warm);
              this.supply(state);
            }
          }),
        );
      }
    }
  }

  /**
   * Run one call through the keep-alive (no exec: a fork in the container instead of a runtime exec). The call
   * is named by a fresh nonce, sent only once the container is verified alone with PID 1; its output is what
   * arrives until PID 1's `capsule-end NONCE STATUS` (held back from the call's stdout). Null when the container
   * ended first (killed, deadline, engine).
   */
  private runInKeepalive(
    warm: Warm,
    input: string,
    runMs: number,
    demux: OutputDemuxer,
  ): Promise<number | null> {
    const nonce = randomBytes(16).toString('hex');
    const marker = Buffer.from(`capsule-end ${nonce} `);
    const bytes = Buffer.from(input);
    return new Promise<number | null>((resolve) => {
      let held: Buffer = Buffer.alloc(0);
      const finish = (code: number | null): void => {
        warm.sink = undefined;
        warm.stdin.off('close', onClose);
        resolve(code);
      };
      const onClose = (): void => {
        if (held.length > 0) demux.push(frame(1, held));
        finish(null);
      };
      warm.sink = (type, payload) => {
        if (type !== 1) {
          demux.push(frame(type, payload));
          return;
        }
        held = Buffer.concat([held, payload]);
        const at = held.indexOf(marker);
        if (at >= 0) {
          const end = held.indexOf(0x0a, at);
          if (end < 0) return;
          if (at > 0) demux.push(frame(1, held.subarray(0, at)));
          const status = held.subarray(at + marker.length, end).toString();
          finish(/^\d{1,3}$/.test(status) ? Number(status) : null);
          return;
        }
        // Keep only what could be the start of the marker; the rest is the call's output.
        const keep = marker.length + 8;
        if (held.length > keep) {
          demux.push(frame(1, held.subarray(0, held.length - keep)));
          held = Buffer.from(held.subarray(held.length - keep));
        }
      };
      warm.stdin.once('close', onClose);
      if (warm.dead) {
        onClose();
        return;
      }
      warm.stdin.write(`run ${nonce} ${bytes.length} ${seconds(runMs)}\n`);
      warm.stdin.write(bytes);
    });
  }

  /** Containers per configuration right now, by state (for tests and the bench). */
  counts(key: string): { idle: number; coming: number; busy: number; target: number } {
    const s = this.keys.get(key);
    return { idle: s?.idle.length ?? 0, coming: s?.coming ?? 0, busy: s?.busy ?? 0, target: s?.target ?? 0 };
  }

  /**
   * Reset a used container and verify it (see KEEPALIVE_SCRIPT): true only when, after the reset, the engine
   * lists PID 1 as the container's only process, and PID 1 then answers the check with the fresh nonce.
   * Any failure, timeout or tampering means false: the container is discarded.
   */
  private async reset(warm: Warm): Promise<boolean> {
    if (warm.dead || this.closed) return false;
    try {
      const before = lineCount(warm.output.stdout(), 'capsule-reset-done');
      warm.stdin.write('reset\n');
      if (!(await this.outputUntil(warm, (out) => lineCount(out, 'capsule-reset-done') > before)))
        return false;
      return await this.verify(warm);
    } catch {
      return false;
    }
  }

  /**
   * The engine lists PID 1 as the container's only process (the hint may be forged; the engine's process list
   * is not), then PID 1 answers `check` with a fresh nonce: clean. `first` (a new container): the check also
   * proves a call would get the bare call user.
   */
  private async verify(warm: Warm, first = false): Promise<boolean> {
    const pids = await this.engine.processes(warm.id);
    if (pids.length !== 1 || pids[0] !== warm.initPid) return false;
    const nonce = randomBytes(16).toString('hex');
    warm.stdin.write(`check ${nonce}${first ? ' first' : ''}\n`);
    let verdict: boolean | undefined;
    const answered = await this.outputUntil(warm, (out) => {
      const lines = out.split('\n');
      if (lines.includes(`capsule-clean ${nonce}`)) verdict = true;
      else if (lines.some((l) => l.endsWith(` ${nonce}`))) verdict = false;
      return verdict !== undefined;
    });
    return answered && verdict === true && !warm.dead && !warm.output.truncated;
  }

  /** Wait until the keep-alive's output satisfies `done` (false on timeout, tampering or the container's end). */
  private outputUntil(warm: Warm, done: (out: string) => boolean): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const check = (): void => {
        if (warm.dead || warm.output.truncated) finish(false);
        else if (done(warm.output.stdout())) finish(true);
      };
      const finish = (ok: boolean): void => {
        clearTimeout(timer);
        warm.stdin.off('data', onData);
        warm.stdin.off('close', onClose);
        resolve(ok);
      };
      // Listeners run in order: startWarm's, which pushes the chunk into warm.output, comes first.
      const onData = (): void => check();
      const onClose = (): void => finish(false);
      const timer = setTimeout(() => finish(false), RESET_TIMEOUT_MS);
      warm.stdin.on('data', onData);
      warm.stdin.once('close', onClose);
      check();
    });
  }

  private stateFor(key: string, spec: ContainerSpec, tools: WatchdogTools): KeyState {
    let state = this.keys.get(key);
    if (state === undefined) {
      state = { spec, tools, idle: [], waiters: [], coming: 0, busy: 0, target: 0, served: 0 };
      this.keys.set(key, state);
    }
    return state;
  }

  /** A clean container with lifetime enough for the call: ready now, or the next one reset or started. */
  private take(
    key: string,
    spec: ContainerSpec,
    tools: WatchdogTools,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<Warm> {
    if (this.closed)
      return Promise.reject(new CapsuleError('RUNNER_UNAVAILABLE', 'the docker runner was closed'));
    const state = this.stateFor(key, spec, tools);
    for (let warm = state.idle.pop(); warm !== undefined; warm = state.idle.pop()) {
      clearTimeout(warm.idleTimer);
      if (this.lifeLeft(warm, timeoutMs)) {
        state.busy++;
        state.served++;
        // Keep one more ready than is in use when calls come back to back.
        this.supply(state);
        return Promise.resolve(warm);
      }
      this.discard(warm);
    }
    // None ready for a configuration that has run before: demand is higher than what is kept ready. (Not
    // on its first call, so a one-shot process never starts a container it will not use.)
    if (state.served > 0) state.target = Math.min(this.maxPerKey, state.target + 1);
    state.served++;
    return new Promise<Warm>((resolve, reject) => {
      const waiter: Waiter = {
        timeoutMs,
        resolve: (warm) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(warm);
        },
        reject: (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      };
      const onAbort = (): void => {
        const at = state.waiters.indexOf(waiter);
        if (at >= 0) state.waiters.splice(at, 1);
        reject(new WaitCanceled());
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      state.waiters.push(waiter);
      this.supply(state);
    });
  }

  /** Start containers until every waiter has one coming and `target` are ready or coming, within the bound. */
  private supply(state: KeyState): void {
    if (this.closed) return;
    const total = (): number => state.idle.length + state.coming + state.busy;
    while (
      (state.waiters.length > state.coming || state.idle.length + state.coming < state.target) &&
      total() < this.maxPerKey
    ) {
      state.coming++;
      const timeoutMs = Math.max(0, ...state.waiters.map((w) => w.timeoutMs));
      this.track(
        this.startWarm(state, timeoutMs).then(
          (warm) => {
            state.coming--;
            this.offer(state, warm);
          },
          (err: unknown) => {
            state.coming--;
            // Only a call that has nothing else coming learns of the failure.
            if (state.waiters.length > state.coming) state.waiters.shift()?.reject(err);
          },
        ),
      );
    }
  }

  /** A clean container: to the longest-waiting call it can serve, else ready (or removed past the bound). */
  private offer(state: KeyState, warm: Warm): void {
    if (this.closed || warm.dead) {
      this.discard(warm);
      this.supply(state);
      return;
    }
    const waiter = state.waiters.shift();
    if (waiter !== undefined) {
      if (this.lifeLeft(warm, waiter.timeoutMs)) {
        state.busy++;
        waiter.resolve(warm);
        return;
      }
      state.waiters.unshift(waiter);
      this.discard(warm);
      this.supply(state);
      return;
    }
    state.idle.push(warm);
    warm.idleTimer = setTimeout(() => {
      const at = state.idle.indexOf(warm);
      if (at < 0) return;
      state.idle.splice(at, 1);
      state.target = Math.max(0, state.target - 1);
      this.discard(warm);
    }, this.idleMs);
    warm.idleTimer.unref();
  }

  private lifeLeft(warm: Warm, timeoutMs: number): boolean {
    const left = warm.lifeMs - (performance.now() - warm.startedAt);
    return !warm.dead && left > timeoutMs + WATCHDOG_GRACE_MS + LIFE_MARGIN_MS;
  }

  private discard(warm: Warm): void {
    clearTimeout(warm.idleTimer);
    warm.dead = true;
    warm.stdin.destroy();
    this.track(this.engine.remove(warm.id).catch(() => {}));
  }

  private track(job: Promise<unknown>): void {
    const tracked = job.catch(() => {}).finally(() => this.pending.delete(tracked));
    this.pending.add(tracked);
  }

  async close(): Promise<void> {
    this.closed = true;
    const closedError = new CapsuleError('RUNNER_UNAVAILABLE', 'the docker runner was closed');
    for (const state of this.keys.values()) {
      for (const w of state.waiters.splice(0)) w.reject(closedError);
    }
    const busy = [...this.busy];
    await Promise.all(busy.map((id) => this.engine.remove(id).catch(() => {})));
    // Starts and resets in flight end in discard() now that the pool is closed.
    while (this.pending.size > 0) await Promise.all([...this.pending]);
    for (const state of this.keys.values()) for (const w of state.idle.splice(0)) this.discard(w);
    while (this.pending.size > 0) await Promise.all([...this.pending]);
    this.keys.clear();
  }

  private async oomKills(id: string, spec: ContainerSpec, tools: WatchdogTools): Promise<number> {
    try {
      const { stream } = await this.engine.exec(id, {
        cmd: [
          ...tools.sh,
          '-c',
          `${tools.bb} cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null`,
        ],
        user: spec.user,
        workingDir: '/',
        env: [],
      });
      const demux = new OutputDemuxer(4096, () => {});
      stream.on('error', () => {});
      stream.on('data', (chunk: Buffer) => demux.push(chunk));
      await new Promise<void>((resolve) => {
        stream.once('end', resolve);
        stream.once('close', resolve);
        stream.end();
      });
      const match = /oom_kill (\d+)/.exec(demux.stdout());
      return match === null ? 0 : Number(match[1]);
    } catch {
      return 0;
    }
  }

  private async startWarm(state: KeyState, timeoutMs: number): Promise<Warm> {
    const { spec, tools } = state;
    // Long enough for at least this call, whatever its timeout.
    const lifeMs = Math.max(this.lifeMs, timeoutMs + WATCHDOG_GRACE_MS + LIFE_MARGIN_MS);
    const ids = /^(\d+):(\d+)$/.exec(spec.user);
    if (ids === null)
      throw new CapsuleError('RUNNER_FAILED', `the call user "${spec.user}" is not numeric uid:gid`);
    const [, uid = '', gid = ''] = ids;
    const id = await this.engine.createContainer(
      keepaliveSpec(spec, tools, {
        lifeMs,
        uid,
        gid,
        asCallUser: this.keepaliveAsCallUser,
        dumpable: this.keepaliveDumpable,
      }),
    );
    let stdin: Duplex | undefined;
    try {
      stdin = await this.engine.attach(id);
      stdin.on('error', () => {});
      await this.engine.start(id);
    } catch (err) {
      stdin?.destroy();
      await this.engine.remove(id).catch(() => {});
      throw new CapsuleError(
        'RUNNER_FAILED',
        `the warm container could not start: ${engineMessage(err)}`,
        {
          hint: 'check the image and the engine (docker info); the keep-alive is busybox sh, from the image or mounted in by capsule',
        },
        { cause: err },
      );
    }
    const warm: Warm = {
      id,
      initPid: 0,
      uses: 0,
      startedAt: performance.now(),
      lifeMs,
      stdin,
      output: new OutputDemuxer(KEEPALIVE_OUTPUT_BYTES, () => {
        warm.dead = true;
      }),
      dead: false,
    };
    const gone = (): void => {
      warm.dead = true;
    };
    stdin.once('end', gone);
    stdin.once('close', gone);
    const frames = new FrameSplitter();
    stdin.on('data', (chunk: Buffer) =>
      frames.push(chunk, (type, payload) => {
        if (warm.sink !== undefined) warm.sink(type, payload);
        else warm.output.push(frame(type, payload));
      }),
    );
    if (this.closed) {
      this.discard(warm);
      throw new CapsuleError('RUNNER_UNAVAILABLE', 'the docker runner was closed');
    }
    // Once the keep-alive says it is set up (nothing of its own is running then, and no call has run yet),
    // its only process is PID 1. Then the first check, before any call: a container whose calls would not
    // get the bare call user (an engine that ignored the user, the capabilities or no-new-privileges) is
    // never used.
    let failure: string | undefined;
    try {
      if (!(await this.outputUntil(warm, (out) => lineCount(out, 'capsule-keepalive-ready') > 0)))
        failure = 'the keep-alive did not start';
      else {
        const pids = await this.engine.processes(id);
        if (pids.length !== 1 || pids[0] === undefined) failure = `${pids.length} processes at start`;
        else {
          warm.initPid = pids[0];
          if (!(await this.verify(warm, true))) failure = 'it failed its first check';
        }
      }
    } catch (err) {
      failure = engineMessage(err);
    }
    if (failure !== undefined) {
      this.discard(warm);
      const said = warm.output.stdout().replace('capsule-keepalive-ready', '').trim();
      throw new CapsuleError(
        'RUNNER_FAILED',
        `the warm container could not be used: ${failure}${said === '' ? '' : ` (${said})`}`,
        {
          hint: 'the engine must honour User, CapDrop/CapAdd and no-new-privileges for reset-reusable containers (docker info); docker.reusable: false runs each call in a fresh container',
        },
      );
    }
    return warm;
  }
}
