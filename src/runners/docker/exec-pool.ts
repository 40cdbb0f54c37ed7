import type { Duplex } from 'node:stream';
import { CapsuleError } from '../../errors.js';
import type { Capability } from '../../manifest/types.js';
import {
  WATCHDOG_GRACE_MS,
  finishedOutcome,
  seconds,
  watchdogCommand,
  type CallOutcome,
  type KilledBy,
  type WatchdogTools,
} from './call.js';
import { OutputDemuxer } from './demux.js';
import { engineMessage } from './engine.js';
import type { ContainerSpec, DockerEngine } from './engine.js';
import { ROLE_LABEL } from './labels.js';

/**
 * PID 1 of a warm container (busybox sh exists in every capsule image). It lives while capsule holds its
 * stdin open, and at most its lifetime: EOF (capsule's attach connection is gone, e.g. capsule was killed) or
 * the timeout ends the container with every exec in it. USR1 is an exec's own deadline passing (call.ts).
 */
const KEEPALIVE_SCRIPT = 'trap "exit 137" USR1 TERM; read -r -t "$1" _; exit 0';
/** A warm container is retired after this many calls, bounding how much state can pile up. */
const MAX_USES = 50;
const STREAM_DRAIN_MS = 2000;
/** Idle warm containers kept per capability configuration (more only exist while calls overlap). */
const MAX_IDLE = 2;
/** No call starts in a warm container with less lifetime left than its timeout plus this. */
const LIFE_MARGIN_MS = 2000;

interface Warm {
  id: string;
  uses: number;
  startedAt: number;
  /** Its own lifetime (held inside it by the keep-alive). */
  lifeMs: number;
  /** Held open for the container's life: closing it (or capsule dying) ends the container. */
  stdin: Duplex;
  dead: boolean;
}

/**
 * Opt-in for capabilities marked `docker.reusable`: calls `exec` into a running hardened container
 * instead of starting a fresh one (~4x faster). STATE LEAKS between calls of the same capability:
 * files in /tmp, background processes, memory use all persist (documented in docs/runners.md).
 * The hardening (no network, read-only rootfs, caps dropped, limits) is the same as for fresh containers;
 * limits apply to the container as a whole. A timed-out, canceled, flooding or OOM-killed call retires it.
 */
export class ExecPool {
  private readonly engine: DockerEngine;
  private readonly idle = new Map<string, Warm[]>();
  private readonly busy = new Set<string>();
  private readonly lifeMs: number;
  private closed = false;

  /** `lifeMs`: how long a warm container lives at most (its own deadline, held inside it). */
  constructor(engine: DockerEngine, lifeMs = 300_000) {
    this.engine = engine;
    this.lifeMs = lifeMs;
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
    if (signal?.aborted === true) {
      return {
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
    }
    const warm =
      this.takeIdle(key, limits.timeoutMs) ?? (await this.startWarm(spec, tools, limits.timeoutMs));
    this.busy.add(warm.id);
    let retire = false;
    let killedBy: KilledBy;
    const kill = (why: 'timeout' | 'abort' | 'overflow'): void => {
      if (killedBy !== undefined) return;
      killedBy = why;
      retire = true;
      // docker cannot kill one exec: the container goes, with everything in it.
      this.engine.kill(warm.id).catch(() => {});
    };
    const demux = new OutputDemuxer(limits.outputBytes, () => kill('overflow'));
    const timer = setTimeout(() => kill('timeout'), limits.timeoutMs);
    const onAbort = (): void => kill('abort');
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      let exec;
      try {
        exec = await this.engine.exec(warm.id, {
          cmd: watchdogCommand(limits.timeoutMs + WATCHDOG_GRACE_MS, spec.cmd, tools),
          user: spec.user,
          workingDir: spec.workingDir,
          env: spec.env,
        });
      } catch (err) {
        retire = true;
        throw new CapsuleError('RUNNER_FAILED', `exec in the warm container failed: ${engineMessage(err)}`, {
          file: capability.manifestPath,
        });
      }
      const { stream, execId } = exec;
      stream.on('error', () => {});
      const ended = new Promise<void>((resolve) => {
        stream.once('end', resolve);
        stream.once('close', resolve);
      });
      stream.on('data', (chunk: Buffer) => demux.push(chunk));
      stream.end(input);
      await ended;
      let code: number | null = null;
      const deadline = Date.now() + STREAM_DRAIN_MS;
      while (code === null && Date.now() < deadline) {
        code = await this.engine.execExitCode(execId).catch(() => -1);
        if (code === null) await new Promise((r) => setTimeout(r, 10));
      }
      let oomKilled = false;
      if (killedBy === undefined && code === 137) {
        // The engine sets State.OOMKilled only when a container exits, not for one exec'd process, so
        // ask the container's memory cgroup (v1 memory.oom_control, v2 memory.events) for its OOM kills.
        // A warm container is retired after any OOM, so a non-zero count is this call's.
        oomKilled = (await this.oomKills(warm.id, spec, tools)) > 0;
        retire = true;
      }
      return finishedOutcome(code, killedBy, oomKilled, demux);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      this.busy.delete(warm.id);
      warm.uses++;
      if (
        retire ||
        this.closed ||
        warm.dead ||
        warm.uses >= MAX_USES ||
        (this.idle.get(key)?.length ?? 0) >= MAX_IDLE
      ) {
        warm.stdin.destroy();
        await this.engine.remove(warm.id).catch(() => {});
      } else {
        const list = this.idle.get(key) ?? [];
        list.push(warm);
        this.idle.set(key, list);
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const warm = [...this.idle.values()].flat();
    for (const w of warm) w.stdin.destroy();
    const all = warm.map((w) => w.id);
    this.idle.clear();
    await Promise.all([...all, ...this.busy].map((id) => this.engine.remove(id).catch(() => {})));
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

  /** An idle warm container with enough lifetime left for a call of `timeoutMs`; expired ones are removed. */
  private takeIdle(key: string, timeoutMs: number): Warm | undefined {
    const list = this.idle.get(key);
    for (let warm = list?.pop(); warm !== undefined; warm = list?.pop()) {
      const left = warm.lifeMs - (performance.now() - warm.startedAt);
      if (!warm.dead && left > timeoutMs + WATCHDOG_GRACE_MS + LIFE_MARGIN_MS) return warm;
      warm.stdin.destroy();
      void this.engine.remove(warm.id).catch(() => {});
    }
    return undefined;
  }

  private async startWarm(spec: ContainerSpec, tools: WatchdogTools, timeoutMs: number): Promise<Warm> {
    // Long enough for at least this call, whatever its timeout.
    const lifeMs = Math.max(this.lifeMs, timeoutMs + WATCHDOG_GRACE_MS + LIFE_MARGIN_MS);
    const id = await this.engine.createContainer({
      ...spec,
      entrypoint: [...tools.sh, '-c', KEEPALIVE_SCRIPT, 'capsule-keepalive', seconds(lifeMs)],
      cmd: [],
      openStdin: true,
      labels: { ...spec.labels, [ROLE_LABEL]: 'warm' },
    });
    let stdin: Duplex | undefined;
    try {
      stdin = await this.engine.attach(id);
      stdin.on('error', () => {});
      await this.engine.start(id);
    } catch (err) {
      stdin?.destroy();
      await this.engine.remove(id).catch(() => {});
      throw new CapsuleError('RUNNER_FAILED', `the warm container could not start: ${engineMessage(err)}`, {
        hint: 'check the image and the engine (docker info); the keep-alive is busybox sh, from the image or mounted in by capsule',
      });
    }
    const warm: Warm = { id, uses: 0, startedAt: performance.now(), lifeMs, stdin, dead: false };
    const gone = (): void => {
      warm.dead = true;
    };
    stdin.once('end', gone);
    stdin.once('close', gone);
    // The keep-alive writes nothing; drain whatever arrives so the stream can end.
    stdin.resume();
    return warm;
  }
}
