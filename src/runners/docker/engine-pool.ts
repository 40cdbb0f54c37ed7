import { CapsuleError } from '../../base/errors.js';
import type { Runner, RunRequest, RunResult } from '../types.js';
import { assertPermit, type RunnerPermit } from '../permit.js';
import { engineMessage } from './engine.js';
import type { DockerEngine, EngineEvent, EngineIdentity, EnginePin, SwarmApi } from './engine.js';
import { ImageBuilder } from './images.js';
import type { ImageProgress } from './images.js';
import { withFileLock } from '../../base/file-lock.js';
import {
  HOST_LABEL,
  INSTANCE_LABEL,
  MANAGED_LABEL,
  ROLE_LABEL,
  ownerLabels,
  processOwner,
} from './labels.js';
import { keptCanary, postureOf, sameDaemon, witnessOf } from './posture-store.js';
import type { PostureStore, StoredPosture } from './posture-store.js';
import type { Owner } from './labels.js';
import { judgePosture, probePosture } from './posture.js';
import type { MeasuredPosture, PostureVerdict } from './posture.js';
import { DockerRunner } from './runner.js';
import type { DockerRunnerOptions } from './runner.js';
import { SwarmRunner } from './swarm-runner.js';
import type { SwarmNodeMeasurement } from './swarm-runner.js';
import { canaryVolume } from './volumes.js';
import { SANDBOX_IMAGES } from './image-recipes.js';

/** Which engine of its pool a canary volume binds (two members may name one daemon). */
const POOL_ENGINE_LABEL = 'capsule.engine';

export type PoolEngine =
  | {
      name: string;
      kind?: 'docker' | undefined;
      engine: DockerEngine;
      /** Where it answers (unix:///…, tcp://…), as its errors name it. */
      host?: string | undefined;
    }
  /** A swarm: calls become one-shot services on it (swarm-runner.ts); `engine` is a manager. */
  | { name: string; kind: 'swarm'; engine: DockerEngine & SwarmApi; host?: string | undefined };

/**
 * What one measurement of an engine found, bound to the daemon it was made on (docs/scale-out.md): the pin
 * (identity and canary) and the posture (a docker engine) or each node's (a swarm).
 */
export interface EngineMeasurement {
  identity: EngineIdentity | undefined;
  /** A docker engine's probe (undefined for a swarm or when it could not run). */
  posture: MeasuredPosture | undefined;
  /** A swarm's nodes, each measured by a probe placed on it. */
  nodes?: SwarmNodeMeasurement[] | undefined;
  verdict: PostureVerdict;
  /** When it was measured (ISO time). */
  measuredAt: string;
  /** How many times this engine was measured in this pool (1: the first). */
  generation: number;
  /** The posture came from the per-user store (measured by an earlier process on this same daemon). */
  stored?: boolean | undefined;
}

/**
 * One connection to an engine and what was measured through it. Every request of its runner goes to the
 * daemon measured (the pin checks each connection); once the pin is lost the epoch is retired and the next call
 * opens a new one, measured again before anything runs.
 */
interface Epoch {
  engine: DockerEngine;
  runner: DockerRunner | SwarmRunner;
  pin: EnginePin | undefined;
  measured: Promise<EngineMeasurement>;
  /** The measurement failed (not sandboxed): reported once, then measured again. */
  failed: boolean;
  /** Calls running on it: an epoch given up without a loss closes its runner after them. */
  calls: Set<Promise<unknown>>;
}

interface Member {
  name: string;
  kind: 'docker' | 'swarm';
  host: string | undefined;
  /** The engine the pool was given: the first epoch's, and the address every later one connects to again. */
  engine: DockerEngine;
  epoch: Epoch | undefined;
  generation: number;
  inFlight: number;
  /** Calls this pool placed there that do not hold their container yet (the engine cannot count them). */
  pending: number;
  calls: number;
  /** Set when a call or a health check found the engine gone; it is checked again before it is used. */
  downSince: number | undefined;
  /** Why it was last found not answering (for the error that says no engine answers). */
  downWhy: string | undefined;
}

export interface EnginePoolOptions {
  /** Options for each engine's own runner (its prestarted containers, images, limits); `engine` is set per member. */
  runner?: Omit<DockerRunnerOptions, 'engine' | 'handleProcessSignals'> | undefined;
  /** How long a health check waits for an engine. Default 3000 ms. */
  healthTimeoutMs?: number | undefined;
  /**
   * Measured postures kept between processes (posture-store.ts): a docker engine whose daemon is provably the
   * one a record names is not probed again. Absent: every process measures its engines.
   */
  postures?: PostureStore | undefined;
  /**
   * A lock file shared by the capsule processes of this user on this host (in the per-user state folder): calls
   * from several processes are placed one at a time, each seeing the containers placed before it. Absent: placed
   * without it (each engine's load is still read from the engine).
   */
  placementLock?: string | undefined;
}

/** Where a call goes; `placed`, when given, is told once the call holds its container there. */
interface Placement {
  member: Member;
  epoch: Epoch;
  placed?: (() => void) | undefined;
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
  private readonly runnerOptions: EnginePoolOptions['runner'];
  /** Epochs given up (their runners closing): close() waits for them. */
  private readonly retiring = new Set<Promise<void>>();
  private readonly postures: PostureStore | undefined;
  private readonly placementLock: string | undefined;
  /** Placements of this process, one at a time (the file lock orders them against other processes). */
  private placing: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(engines: readonly PoolEngine[], options: EnginePoolOptions = {}) {
    if (engines.length === 0) throw new Error('EnginePool: no engines');
    this.healthTimeoutMs = options.healthTimeoutMs ?? 3000;
    this.progress = options.runner?.onProgress ?? (() => {});
    this.runnerOptions = options.runner;
    this.postures = options.postures;
    this.placementLock = options.placementLock;
    this.members = engines.map((e) => ({
      name: e.name,
      kind: e.kind === 'swarm' ? 'swarm' : 'docker',
      host: e.host,
      engine: e.engine,
      epoch: undefined,
      generation: 0,
      inFlight: 0,
      pending: 0,
      calls: 0,
      downSince: undefined,
      downWhy: undefined,
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
    // Asked without measuring: an engine is measured when a call of it is judged.
    const results = await Promise.all(
      this.members.map(async (m) => ({
        m,
        r: await (m.epoch?.runner.available() ?? this.reachable(m)),
      })),
    );
    if (results.some(({ r }) => r.ok)) return { ok: true };
    return {
      ok: false,
      reason: results.map(({ m, r }) => `${m.name}: ${r.ok ? 'ok' : r.reason}`).join('; '),
    };
  }

  /**
   * The measured posture of each healthy engine. Resolves with why docker capabilities are not a sandbox here —
   * the weakest engine a call may land on decides — or undefined. Asked before every call: while each engine's
   * pin holds (the same daemon, no reconnect, no failed health check) that costs no request; otherwise the
   * engine is measured again first.
   */
  async measureIsolation(): Promise<string | undefined> {
    const healthy = await this.healthy();
    const verdicts = await Promise.all(
      healthy.map(async (m) => ({ m, verdict: (await this.current(m)).measurement.verdict })),
    );
    // An engine found down while it was measured is not one a call may land on.
    const weak = verdicts.filter((v) => !v.verdict.sandboxed && v.m.downSince === undefined);
    if (weak.length === 0) return undefined;
    return weak.map((v) => `engine ${v.m.name}: ${v.verdict.missing.join(', ')}`).join('; ');
  }

  /** One engine's current measurement (measured first when there is none that still holds). */
  async measurement(name: string): Promise<EngineMeasurement> {
    const m = this.members.find((x) => x.name === name);
    if (m === undefined) throw new Error(`EnginePool: no engine ${name}`);
    return (await this.current(m)).measurement;
  }

  /** One engine's measured posture (for `capsule engines`). */
  async posture(name: string): Promise<MeasuredPosture> {
    const measured = await this.measurement(name);
    if (measured.posture === undefined)
      throw new Error(`engine ${name}: posture not measured (${measured.verdict.missing.join(', ')})`);
    return measured.posture;
  }

  async run(request: RunRequest, permit: RunnerPermit): Promise<RunResult> {
    // Refused before a call is placed; the engine's runner spends the permit.
    assertPermit(permit, request.capability);
    const { member, epoch, placed } = await this.pick(request);
    const call = epoch.runner.run(placed === undefined ? request : { ...request, onPlaced: placed }, permit);
    epoch.calls.add(call);
    try {
      return await call;
    } catch (err) {
      // Was it the engine? A call it answered a refusal for (bad manifest, missing runtime) leaves it healthy.
      const lost = await epoch.pin?.check();
      const alive =
        lost === undefined &&
        (await epoch.engine
          .ping(this.healthTimeoutMs)
          .then(() => true)
          .catch(() => false));
      if (!alive) {
        // Whatever answers there next is measured again before a call runs on it.
        this.retire(member, epoch, lost ?? `engine ${member.name} failed a health check`);
        if (!(await this.answers(member))) member.downSince = Date.now();
      }
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
      epoch.calls.delete(call);
      member.inFlight -= 1;
      placed?.();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const m of this.members) if (m.epoch !== undefined) this.retire(m, m.epoch, undefined, true);
    await Promise.all([...this.retiring]);
  }

  /**
   * The healthy engine with the fewest calls in flight (ties: the one that ran fewer calls), now counted as
   * busier — among those whose current measurement allows the call.
   */
  private async pick(request: RunRequest): Promise<Placement> {
    if (this.closed) throw new CapsuleError('RUNNER_UNAVAILABLE', 'the engine pool was closed');
    const healthy = await this.healthy();
    let candidates = healthy;
    if (request.engine !== undefined) {
      // Pinned (compare across engines): that engine or nothing, never another one in its place.
      candidates = healthy.filter((m) => m.name === request.engine);
      if (candidates.length === 0) {
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
    }
    if (candidates.length === 0) {
      throw new CapsuleError(
        'RUNNER_UNAVAILABLE',
        `no engine of the pool answers (${this.members.map((m) => this.describeDown(m)).join('; ')})`,
        {
          file: request.capability.manifestPath,
          hint: 'check the engines (capsule engines) or pick one with --engine NAME',
        },
      );
    }
    // Each engine as measured now: a daemon that changed since the call was judged is measured again here.
    const measured = (
      await Promise.all(candidates.map(async (m) => ({ m, ...(await this.current(m)) })))
    ).filter((x) => x.m.downSince === undefined);
    if (measured.length === 0) {
      throw new CapsuleError(
        'RUNNER_UNAVAILABLE',
        `no engine answers (${candidates.map((m) => this.describeDown(m)).join('; ')})`,
        { file: request.capability.manifestPath, hint: 'check the engines (capsule engines)' },
      );
    }
    const usable = measured.filter(
      (x) => request.requireSandboxed !== true || x.measurement.verdict.sandboxed,
    );
    if (usable.length === 0) {
      // The gate allowed it as sandboxed; the engines it could run on are not (any more): never run it there.
      const why = measured
        .map((x) => `engine ${x.m.name}: ${x.measurement.verdict.missing.join(', ')}`)
        .join('; ');
      throw new CapsuleError(
        'PERMISSION_DENIED',
        `${request.capability.name} was allowed as sandboxed, but ${why} — not sandboxed; it was not run`,
        {
          file: request.capability.manifestPath,
          key: `run_capability:${request.capability.name}`,
          hint: 'the engine changed since the call was judged; run it again to have it judged on what is measured now',
        },
      );
    }
    if (usable.length === 1) {
      const only = usable[0] as (typeof usable)[number];
      only.m.inFlight += 1;
      only.m.calls += 1;
      return { member: only.m, epoch: only.epoch };
    }
    return this.placeByLoad(usable);
  }

  /**
   * The engine with the least load as the engines themselves report it — capsule's call containers there, from
   * every capsule process and host using it — gets the call. One placement at a time in this process and, with
   * the lock, among this user's processes on this host: a turn lasts until its call holds its container on the
   * engine (or ends, or a health check's time passes), so the next placement counts it. Ties: fewer calls from
   * this pool so far, then the order of the engines.
   */
  private async placeByLoad(usable: ReadonlyArray<{ m: Member; epoch: Epoch }>): Promise<Placement> {
    let chosen!: (choice: Placement) => void;
    const choice = new Promise<Placement>((resolve) => (chosen = resolve));
    const place = async (): Promise<void> => {
      const loads = await Promise.all(usable.map((x) => this.loadOf(x.m, x.epoch)));
      let at = 0;
      for (let i = 1; i < usable.length; i++) {
        const [a, b] = [usable[at] as (typeof usable)[number], usable[i] as (typeof usable)[number]];
        const [la, lb] = [loads[at] as number, loads[i] as number];
        if (lb < la || (lb === la && b.m.calls < a.m.calls)) at = i;
      }
      const best = usable[at] as (typeof usable)[number];
      best.m.inFlight += 1;
      best.m.pending += 1;
      best.m.calls += 1;
      let placed!: () => void;
      const held = new Promise<void>((resolve) => {
        let once = false;
        placed = () => {
          if (once) return;
          once = true;
          best.m.pending -= 1;
          resolve();
        };
      });
      chosen({ member: best.m, epoch: best.epoch, placed });
      // Without the lock only this process places: its own calls not yet on a docker engine are counted from
      // memory (pending, in loadOf), so the next placement need not wait for this one's container.
      if (this.placementLock === undefined && best.m.kind === 'docker') return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        held,
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, this.healthTimeoutMs);
        }),
      ]);
      clearTimeout(timer);
    };
    const lock = this.placementLock;
    const turn = this.placing.then(() =>
      lock === undefined
        ? place()
        : withFileLock(lock, place, { timeoutMs: 10_000, staleMs: 5_000 }).catch(async (err: unknown) => {
            // A lock that cannot be had only costs the spread, never the call.
            if (err instanceof CapsuleError && err.code === 'LOCK_TIMEOUT') return place();
            throw err;
          }),
    );
    this.placing = turn.catch(() => undefined);
    // A turn that failed before choosing (the lock's folder cannot be made) fails the call.
    return Promise.race([choice, turn.then(() => choice)]);
  }

  /**
   * An engine's load as it reports it: capsule's call containers created or running there (a swarm: capsule's
   * services), from every process and host, less the ones this pool prestarted there that wait for a call (a
   * prestarted container runs too: counted, it would send the next call to the engine whose next container is
   * not ready yet). Not readable in time: this pool's own calls in flight there.
   */
  private async loadOf(m: Member, epoch: Epoch): Promise<number> {
    const engine = epoch.engine;
    const runner = epoch.runner;
    const work =
      m.kind === 'swarm'
        ? (engine as DockerEngine & SwarmApi).listServices([`${MANAGED_LABEL}=1`]).then((s) => s.length)
        : engine.listContainers([`${MANAGED_LABEL}=1`, `${ROLE_LABEL}=call`]).then((cs) => {
            const busy = cs.filter((c) => c.state === 'running' || c.state === 'created').length;
            const waiting = runner instanceof DockerRunner ? runner.waitingContainers() : 0;
            return Math.max(0, busy - waiting) + m.pending;
          });
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        work,
        new Promise<number>((resolve) => {
          timer = setTimeout(() => resolve(m.inFlight), this.healthTimeoutMs);
        }),
      ]);
    } catch {
      return m.inFlight;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Members that answer; one marked down is asked again (on a new connection) and comes back when it answers. */
  private async healthy(): Promise<Member[]> {
    const checked = await Promise.all(
      this.members.map(async (m) => {
        if (m.downSince === undefined) return m;
        const engine = this.reach(m);
        try {
          // A new connection: the old one's pin is lost and refuses every request.
          await engine.ping(this.healthTimeoutMs);
          m.downSince = undefined;
          m.downWhy = undefined;
          // A restarted engine may be another daemon behind the same address: measured again before it is used.
          if (m.epoch !== undefined) this.retire(m, m.epoch, `engine ${m.name} was down`);
          return m;
        } catch (err) {
          m.downWhy = engineMessage(err);
          return undefined;
        } finally {
          if (engine !== m.engine && engine !== m.epoch?.engine) engine.disconnect?.();
        }
      }),
    );
    return checked.filter((m): m is Member => m !== undefined);
  }

  /**
   * The member's epoch whose measurement still holds, measured (again) first when there is none: a pin lost
   * (another daemon, a reconnect, a restart or reload), a measurement that failed.
   */
  private async current(m: Member): Promise<{ epoch: Epoch; measurement: EngineMeasurement }> {
    for (let attempt = 0; ; attempt++) {
      const epoch = m.epoch ?? this.open(m);
      const measurement = await epoch.measured;
      const lost = epoch.pin === undefined ? undefined : await epoch.pin.check();
      const swarmChanged =
        lost === undefined && epoch.runner instanceof SwarmRunner && !epoch.failed
          ? await epoch.runner.nodesChanged().catch((err: unknown) => engineMessage(err))
          : undefined;
      const stale = lost ?? swarmChanged;
      // Measuring failed: an engine that does not answer is down (not one a call may land on).
      if (epoch.failed && !(await this.answers(m))) m.downSince ??= Date.now();
      if (stale === undefined || attempt >= 1) {
        // A failed measurement is reported (not sandboxed) and tried again next time.
        if (epoch.failed || stale !== undefined) this.retire(m, epoch, stale);
        if (stale === undefined) return { epoch, measurement };
        return {
          epoch,
          measurement: {
            ...measurement,
            verdict: { sandboxed: false, missing: [`it changed while it was measured (${stale})`] },
          },
        };
      }
      this.retire(m, epoch, stale);
    }
  }

  /** Whether a member not measured yet answers (a swarm: and has a ready node), without measuring it. */
  private async reachable(m: Member): Promise<{ ok: true } | { ok: false; reason: string }> {
    const engine = this.reach(m);
    try {
      await engine.ping(this.healthTimeoutMs);
      if (m.kind === 'swarm') {
        const nodes = await (engine as DockerEngine & SwarmApi).nodes();
        if (!nodes.some((n) => n.state === 'ready'))
          return { ok: false, reason: 'no node of the swarm is ready' };
      }
      return { ok: true };
    } catch (err) {
      return { ok: false, reason: `does not answer (${engineMessage(err)})` };
    } finally {
      if (engine !== m.engine) engine.disconnect?.();
    }
  }

  /** An engine object to ask the member's address without a call: its epoch's, or a new connection. */
  private reach(m: Member): DockerEngine {
    if (m.epoch !== undefined) return m.epoch.engine;
    return m.generation === 0 ? m.engine : (m.engine.another?.() ?? m.engine);
  }

  /** Whether something answers at the member's address now (a new connection, no call). */
  private async answers(m: Member): Promise<boolean> {
    const engine = m.engine.another?.() ?? m.engine;
    try {
      await engine.ping(this.healthTimeoutMs);
      return true;
    } catch (err) {
      m.downWhy = engineMessage(err);
      return false;
    } finally {
      if (engine !== m.engine) engine.disconnect?.();
    }
  }

  /** Cleanup that waits for an engine at most a health check's time (a hung daemon never holds up close()). */
  private async bounded(work: Promise<unknown>): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      work.catch(() => {}),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, this.healthTimeoutMs);
      }),
    ]);
    clearTimeout(timer);
  }

  /** `engine NAME at HOST: why` for an engine that does not answer. */
  private describeDown(m: Member): string {
    const at = m.host === undefined ? '' : ` at ${m.host}`;
    return `engine ${m.name}${at}${m.downWhy === undefined ? '' : `: ${m.downWhy}`}`;
  }

  /** The member's epoch, opened (a new connection, measured before first use) when it has none. */
  private open(m: Member): Epoch {
    if (m.epoch !== undefined) return m.epoch;
    // The first epoch uses the engine as given; each later one its own new connection.
    const engine = m.generation === 0 ? m.engine : (m.engine.another?.() ?? m.engine);
    m.generation += 1;
    const generation = m.generation;
    const runner =
      m.kind === 'swarm'
        ? new SwarmRunner({ manager: engine as DockerEngine & SwarmApi, cpus: this.runnerOptions?.cpus })
        : new DockerRunner({
            ...this.runnerOptions,
            // Granted variables come from the runtime's environment; a pool built without one grants none.
            env: this.runnerOptions?.env ?? {},
            engine,
            engineHost: m.host,
            handleProcessSignals: false,
            // Each engine builds (or has loaded) its own images: say which one a build is for.
            onProgress: (message) => this.progress(`${m.name}: ${message}`),
          });
    const epoch: Epoch = {
      engine,
      runner,
      pin: undefined,
      failed: false,
      calls: new Set(),
      measured: Promise.resolve(undefined as unknown as EngineMeasurement),
    };
    epoch.measured = this.measureEpoch(epoch, m.name, generation).catch((err: unknown) => {
      // Not measured is not sandboxed: never assume a posture.
      epoch.failed = true;
      return {
        identity: epoch.pin?.identity,
        posture: undefined,
        verdict: { sandboxed: false, missing: [`posture not measured (${engineMessage(err)})`] },
        measuredAt: new Date().toISOString(),
        generation,
      };
    });
    m.epoch = epoch;
    return epoch;
  }

  /** Pin the epoch's engine to the daemon answering now, then measure that daemon's posture through the pin. */
  private async measureEpoch(epoch: Epoch, name: string, generation: number): Promise<EngineMeasurement> {
    const { engine, runner } = epoch;
    if (engine.pin === undefined) {
      // An engine that cannot be bound to its daemon cannot prove a call lands where it was measured.
      return {
        identity: undefined,
        posture: undefined,
        verdict: { sandboxed: false, missing: ['the engine cannot be bound to the daemon it measures'] },
        measuredAt: new Date().toISOString(),
        generation,
      };
    }
    const member = { [POOL_ENGINE_LABEL]: name };
    const store = runner instanceof SwarmRunner ? undefined : this.postures;
    const address = engine.address;
    const stored = store === undefined || address === undefined ? undefined : await store.load(address);
    // A stored measurement's canary, when the daemon answering has it; otherwise a canary of this measurement
    // (kept on the daemon when the measurement is to be stored).
    epoch.pin =
      (stored === undefined ? undefined : await engine.resumePin?.({ name: stored.identity.canary })) ??
      (await engine.pin(
        store === undefined || address === undefined
          ? canaryVolume(this.owner, member)
          : keptCanary({ ...member, [HOST_LABEL]: this.owner.host }),
      ));
    const identity = epoch.pin.identity;
    // This engine's canaries from earlier measurements that ended in a loss (an A→B→A swap brings the daemon
    // back) are removed through the new pin, on the daemon that holds them.
    const mine = [
      `${ROLE_LABEL}=pin`,
      `${INSTANCE_LABEL}=${this.owner.instance}`,
      `${POOL_ENGINE_LABEL}=${name}`,
    ];
    // Only an engine measured before in this pool can have left one (the instance is this pool's own).
    if (generation > 1) {
      const stale = (await engine.listVolumes(mine)).filter((v) => v !== identity.canary);
      await Promise.all(stale.map((v) => engine.removeVolume(v).catch(() => {})));
    }
    if (runner instanceof SwarmRunner) {
      const nodes = await runner.measureNodes();
      const weak = nodes
        .filter((n) => !n.verdict.sandboxed)
        .map((n) => `node ${n.hostname || n.id}: ${n.verdict.missing.join(', ')}`);
      return {
        identity,
        posture: undefined,
        nodes,
        verdict:
          nodes.length === 0
            ? { sandboxed: false, missing: ['no node of the swarm is ready, nothing was measured'] }
            : { sandboxed: weak.length === 0, missing: weak },
        measuredAt: new Date().toISOString(),
        generation,
      };
    }
    const kept = stored === undefined ? undefined : await this.stillMeasured(engine, stored, identity);
    if (stored !== undefined && kept !== undefined) {
      const posture = postureOf(stored);
      const pin = epoch.pin;
      // The record moves on to a newer witness (beside the call, while the pin holds): the next process needs
      // the daemon's log to reach back to it only, not to the probe.
      if (kept.next !== undefined && store !== undefined) {
        const next = kept.next;
        const saving = (async () => {
          if ((await pin.check()) === undefined) await store.save({ ...stored, witness: next });
        })()
          .catch(() => {})
          .finally(() => this.retiring.delete(saving));
        this.retiring.add(saving);
      }
      return {
        identity,
        posture,
        verdict: judgePosture(posture),
        measuredAt: new Date(stored.measuredAt).toISOString(),
        generation,
        stored: true,
      };
    }
    // A call waits for this (a hardened probe container, stored for the next process): say so.
    this.progress(`${name}: measuring the engine's isolation (once per daemon)`);
    await new ImageBuilder({ engine }).ensure(SANDBOX_IMAGES.busybox, this.progress);
    const measuredAt = Date.now();
    let probe: string | undefined;
    const posture = await probePosture(engine, {
      runtime: 'runc',
      labels: ownerLabels(this.owner),
      onContainer: (id) => (probe = id),
    });
    // Kept only while the pin holds: a measurement the daemon changed under is not one to reuse.
    const config = identity.config;
    if (store !== undefined && address !== undefined && probe !== undefined && config !== undefined)
      if ((await epoch.pin.check()) === undefined)
        await store.save({ address, identity: { ...identity, config }, posture, measuredAt, probe });
    return {
      identity,
      posture,
      verdict: judgePosture(posture),
      measuredAt: new Date(measuredAt).toISOString(),
      generation,
    };
  }

  /**
   * Whether a stored measurement still holds for the daemon the pin reached (its canary already checked): the
   * same identity and configuration, and the same daemon process since — its own event log, which lives in its
   * memory, still holds the record's witness (the probe's creation, or a later one a process checked) and no
   * reload after it. Any doubt (a log that no longer reaches back that far, an error, no answer in time) is a
   * no: the engine is measured again. Yes comes with the newest creation the log holds since, when there is
   * one: the same process, unchanged since the witness, logged it — the next witness.
   */
  private async stillMeasured(
    engine: DockerEngine,
    stored: StoredPosture,
    identity: EngineIdentity,
  ): Promise<{ next: { id: string; since: number } | undefined } | undefined> {
    if (!sameDaemon(stored.identity, identity) || engine.events === undefined) return undefined;
    const witness = witnessOf(stored);
    let timer: NodeJS.Timeout | undefined;
    try {
      const log = await Promise.race([
        engine.events({
          since: witness.since,
          until: Date.now() / 1000,
          filters: { type: ['container', 'daemon'] },
        }),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('no answer in time')), this.healthTimeoutMs);
        }),
      ]);
      const created = (e: EngineEvent): boolean =>
        e.type === 'container' && e.action === 'create' && /^[0-9a-f]{64}$/.test(e.id);
      if (log.some((e) => e.type === 'daemon')) return undefined;
      if (!log.some((e) => created(e) && e.id === witness.id)) return undefined;
      const newest = log.findLast((e) => created(e) && (e.time ?? 0) > 0);
      const next =
        newest === undefined || newest.id === witness.id
          ? undefined
          : // A second before: the daemon logs whole seconds here and reads `since` to the fraction.
            { id: newest.id, since: (newest.time ?? 0) - 1 };
      return { next };
    } catch {
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Give up an epoch: with `why` its pin refuses every request from now on and its runner is closed at once;
   * without, its runner is closed after the calls running on it (or at once when the pool closes).
   */
  private retire(m: Member, epoch: Epoch, why: string | undefined, now = false): void {
    if (m.epoch === epoch) m.epoch = undefined;
    if (why !== undefined) epoch.pin?.lose(why);
    const done = (async () => {
      await epoch.measured;
      if (why === undefined && !now) await Promise.allSettled([...epoch.calls]);
      await epoch.runner.close().catch(() => {});
      const pin = epoch.pin;
      const lost = pin === undefined ? undefined : await pin.check().catch(() => 'not checked');
      if (pin !== undefined) await this.bounded(pin.release());
      epoch.engine.disconnect?.();
      if (pin !== undefined && lost !== undefined) {
        // A lost pin sends nothing: the canary goes over a new connection, from the daemon there if it has it
        // (the measured one back at its address); another daemon answers 404. No call data is sent.
        const fresh = m.engine.another?.();
        if (fresh !== undefined) await this.bounded(fresh.removeVolume(pin.identity.canary));
        fresh?.disconnect?.();
      }
    })().finally(() => this.retiring.delete(done));
    this.retiring.add(done);
  }
}
