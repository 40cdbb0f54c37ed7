import { CapsuleError } from '../../errors.js';
import type { Runner, RunRequest, RunResult } from '../types.js';
import { engineMessage } from './engine.js';
import type { DockerEngine, SwarmApi } from './engine.js';
import { ImageBuilder } from './images.js';
import type { ImageProgress } from './images.js';
import { ownerLabels, processOwner } from './labels.js';
import type { Owner } from './labels.js';
import { judgePosture, probePosture } from './posture.js';
import type { MeasuredPosture, PostureVerdict } from './posture.js';
import { DockerRunner } from './runner.js';
import type { DockerRunnerOptions } from './runner.js';
import { SwarmRunner } from './swarm-runner.js';
import { SANDBOX_IMAGES } from './image-recipes.js';

export type PoolEngine =
  | {
      name: string;
      kind?: 'docker' | undefined;
      engine: DockerEngine;
      /** Where it answers (unix:///…, tcp://…), as its errors name it. */
      host?: string | undefined;
    }
  /** A swarm: calls become one-shot services on it (swarm-runner.ts); `engine` is a manager. */
  | { name: string; kind: 'swarm'; engine: DockerEngine & SwarmApi };

interface Member {
  name: string;
  engine: DockerEngine;
  runner: DockerRunner | SwarmRunner;
  inFlight: number;
  calls: number;
  /** Set when a call or a health check found the engine gone; it is checked again before it is used. */
  downSince: number | undefined;
  posture: Promise<MeasuredPosture> | undefined;
}

export interface EnginePoolOptions {
  /** Options for each engine's own runner (its prestarted containers, images, limits); `engine` is set per member. */
  runner?: Omit<DockerRunnerOptions, 'engine' | 'handleProcessSignals'> | undefined;
  /** How long a health check waits for an engine. Default 3000 ms. */
  healthTimeoutMs?: number | undefined;
}

/** What `capsule engines` and the isolation judge see of one member. */
export interface PoolEngineStatus {
  name: string;
  healthy: boolean;
  inFlight: number;
  calls: number;
}

/**
 * Docker capabilities across several Docker engines (docs/scale-out.md): each engine has its own DockerRunner
 * (its own prestarted hardened containers, images built or loaded on it), a call goes to the healthy engine with
 * the fewest calls in flight, and an engine that fails mid-call fails that call with the engine's name. Nothing
 * is retried on another engine: a capability may have had effects before its engine died.
 */
export class EnginePool implements Runner {
  readonly environment = 'docker' as const;
  private readonly members: Member[];
  private readonly healthTimeoutMs: number;
  private readonly owner: Owner = processOwner();
  private readonly progress: ImageProgress;

  constructor(engines: readonly PoolEngine[], options: EnginePoolOptions = {}) {
    if (engines.length === 0) throw new Error('EnginePool: no engines');
    this.healthTimeoutMs = options.healthTimeoutMs ?? 3000;
    this.progress = options.runner?.onProgress ?? (() => {});
    this.members = engines.map((e) => ({
      name: e.name,
      engine: e.engine,
      runner:
        e.kind === 'swarm'
          ? new SwarmRunner({ manager: e.engine, cpus: options.runner?.cpus })
          : new DockerRunner({
              ...options.runner,
              // Granted variables come from the runtime's environment; a pool built without one grants none.
              env: options.runner?.env ?? {},
              engine: e.engine,
              engineHost: e.host,
              handleProcessSignals: false,
              // Each engine builds (or has loaded) its own images: say which one a build is for.
              onProgress: (message) => this.progress(`${e.name}: ${message}`),
            }),
      inFlight: 0,
      calls: 0,
      downSince: undefined,
      posture: undefined,
    }));
  }

  status(): PoolEngineStatus[] {
    return this.members.map((m) => ({
      name: m.name,
      healthy: m.downSince === undefined,
      inFlight: m.inFlight,
      calls: m.calls,
    }));
  }

  async available(): Promise<{ ok: true } | { ok: false; reason: string }> {
    const results = await Promise.all(this.members.map(async (m) => ({ m, r: await m.runner.available() })));
    if (results.some(({ r }) => r.ok)) return { ok: true };
    return {
      ok: false,
      reason: results.map(({ m, r }) => `${m.name}: ${r.ok ? 'ok' : r.reason}`).join('; '),
    };
  }

  /**
   * The measured posture of each healthy engine (probed once per engine and session). Resolves with why docker
   * capabilities are not a sandbox here — the weakest engine a call may land on decides — or undefined.
   */
  async measureIsolation(): Promise<string | undefined> {
    const healthy = await this.healthy();
    const verdicts = await Promise.all(healthy.map(async (m) => ({ m, verdict: await this.verdictOf(m) })));
    const weak = verdicts.filter((v) => !v.verdict.sandboxed);
    if (weak.length === 0) return undefined;
    return weak.map((v) => `engine ${v.m.name}: ${v.verdict.missing.join(', ')}`).join('; ');
  }

  /** One engine's measured posture (for `capsule engines`). */
  async posture(name: string): Promise<MeasuredPosture> {
    const m = this.members.find((x) => x.name === name);
    if (m === undefined) throw new Error(`EnginePool: no engine ${name}`);
    return this.measure(m);
  }

  async run(request: RunRequest): Promise<RunResult> {
    const member = await this.pick(request);
    try {
      return await member.runner.run(request);
    } catch (err) {
      // Was it the engine? A call it answered a refusal for (bad manifest, missing runtime) leaves it healthy.
      const alive = await member.engine
        .ping(this.healthTimeoutMs)
        .then(() => true)
        .catch(() => false);
      if (!alive) member.downSince = Date.now();
      if (err instanceof CapsuleError) {
        throw new CapsuleError(
          alive ? err.code : 'RUNNER_FAILED',
          alive
            ? `engine ${member.name}: ${err.message}`
            : `engine ${member.name} failed during the call: ${err.message}`,
          {
            ...err.details,
            engine: member.name,
            hint: alive
              ? err.details.hint
              : `the call was not retried (it may have had effects); check engine ${member.name} (capsule engines) and run it again`,
          },
          { cause: err },
        );
      }
      throw new CapsuleError(
        'RUNNER_FAILED',
        `engine ${member.name} failed during the call: ${engineMessage(err)}`,
        { file: request.capability.manifestPath, engine: member.name },
        { cause: err },
      );
    } finally {
      member.inFlight -= 1;
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.members.map((m) => m.runner.close()));
  }

  /** The healthy engine with the fewest calls in flight (ties: the one that ran fewer calls), now counted as busier. */
  private async pick(request: RunRequest): Promise<Member> {
    const healthy = await this.healthy();
    if (request.engine !== undefined) {
      // Pinned (compare across engines): that engine or nothing, never another one in its place.
      const pinned = healthy.find((m) => m.name === request.engine);
      if (pinned === undefined) {
        const known = this.members.some((m) => m.name === request.engine);
        throw new CapsuleError(
          'RUNNER_UNAVAILABLE',
          known
            ? `engine ${request.engine} does not answer`
            : `engine ${request.engine} is not one of this pool (${this.members.map((m) => m.name).join(', ')})`,
          {
            file: request.capability.manifestPath,
            engine: request.engine,
            hint: 'check the engines (capsule engines)',
          },
        );
      }
      pinned.inFlight += 1;
      pinned.calls += 1;
      return pinned;
    }
    if (healthy.length === 0) {
      throw new CapsuleError(
        'RUNNER_UNAVAILABLE',
        `no engine of the pool answers (${this.members.map((m) => m.name).join(', ')})`,
        {
          file: request.capability.manifestPath,
          hint: 'check the engines (capsule engines) or pick one with --engine NAME',
        },
      );
    }
    const best = healthy.reduce((a, m) =>
      m.inFlight < a.inFlight || (m.inFlight === a.inFlight && m.calls < a.calls) ? m : a,
    );
    // Counted in the same turn as the choice: calls picked concurrently see each other's load.
    best.inFlight += 1;
    best.calls += 1;
    return best;
  }

  /** Members that answer; one marked down is asked again (and comes back when it answers). */
  private async healthy(): Promise<Member[]> {
    const checked = await Promise.all(
      this.members.map(async (m) => {
        if (m.downSince === undefined) return m;
        try {
          await m.engine.ping(this.healthTimeoutMs);
          m.downSince = undefined;
          // A restarted engine may be another daemon behind the same address: measure it again.
          m.posture = undefined;
          return m;
        } catch {
          return undefined;
        }
      }),
    );
    return checked.filter((m): m is Member => m !== undefined);
  }

  private measure(m: Member): Promise<MeasuredPosture> {
    if (m.posture === undefined) {
      const job = (async () => {
        await new ImageBuilder({ engine: m.engine }).ensure(SANDBOX_IMAGES.busybox, this.progress);
        return probePosture(m.engine, { runtime: 'runc', labels: ownerLabels(this.owner) });
      })();
      m.posture = job;
      job.catch(() => {
        if (m.posture === job) m.posture = undefined;
      });
    }
    return m.posture;
  }

  private async verdictOf(m: Member): Promise<PostureVerdict> {
    if (m.runner instanceof SwarmRunner) {
      // Each node of the swarm is measured by a probe service pinned to it.
      const why = await m.runner
        .measureIsolation()
        .catch((err: unknown) => `posture not measured (${engineMessage(err)})`);
      return why === undefined ? { sandboxed: true, missing: [] } : { sandboxed: false, missing: [why] };
    }
    try {
      return judgePosture(await this.measure(m));
    } catch (err) {
      // Not measured is not sandboxed: never assume a posture.
      return { sandboxed: false, missing: [`posture not measured (${engineMessage(err)})`] };
    }
  }
}
