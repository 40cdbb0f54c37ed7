import { CapsuleError } from '../../errors.js';
import type { Capability } from '../../manifest/types.js';
import { finishedOutcome, type CallOutcome, type KilledBy } from './call.js';
import { OutputDemuxer } from './demux.js';
import { engineMessage } from './dockerode-engine.js';
import type { ContainerSpec, DockerEngine } from './engine.js';
import { ROLE_LABEL } from './labels.js';

/** Keeps the warm container alive between execs; busybox sh/sleep exist in every capsule image. */
const KEEPALIVE = ['/bin/sh', '-c', 'trap "exit 0" TERM; while :; do sleep 3600; done'];
/** A warm container is retired after this many calls, bounding how much state can pile up. */
const MAX_USES = 50;
const STREAM_DRAIN_MS = 2000;
/** Idle warm containers kept per capability configuration (more only exist while calls overlap). */
const MAX_IDLE = 2;

interface Warm {
  id: string;
  uses: number;
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
  private closed = false;

  constructor(engine: DockerEngine) {
    this.engine = engine;
  }

  async run(
    key: string,
    spec: ContainerSpec,
    capability: Capability,
    input: string,
    signal: AbortSignal | undefined,
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
    const warm = this.idle.get(key)?.pop() ?? (await this.startWarm(spec));
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
          cmd: spec.cmd,
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
        oomKilled = (await this.oomKills(warm.id, spec)) > 0;
        retire = true;
      }
      return finishedOutcome(code, killedBy, oomKilled, demux);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      this.busy.delete(warm.id);
      warm.uses++;
      if (retire || this.closed || warm.uses >= MAX_USES || (this.idle.get(key)?.length ?? 0) >= MAX_IDLE) {
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
    const all = [...this.idle.values()].flat().map((w) => w.id);
    this.idle.clear();
    await Promise.all([...all, ...this.busy].map((id) => this.engine.remove(id).catch(() => {})));
  }

  private async oomKills(id: string, spec: ContainerSpec): Promise<number> {
    try {
      const { stream } = await this.engine.exec(id, {
        cmd: [
          '/bin/sh',
          '-c',
          'cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null',
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

  private async startWarm(spec: ContainerSpec): Promise<Warm> {
    const id = await this.engine.createContainer({
      ...spec,
      entrypoint: [],
      cmd: KEEPALIVE,
      openStdin: false,
      labels: { ...spec.labels, [ROLE_LABEL]: 'warm' },
    });
    try {
      await this.engine.start(id);
    } catch (err) {
      await this.engine.remove(id).catch(() => {});
      throw new CapsuleError('RUNNER_FAILED', `the warm container could not start: ${engineMessage(err)}`, {
        hint: 'docker.reusable needs /bin/sh and sleep in the image (every capsule image has them)',
      });
    }
    return { id, uses: 0 };
  }
}
