import { createHash } from 'node:crypto';
import { lstat } from 'node:fs/promises';
import { CapsuleError } from '../../base/errors.js';
import type { Capability } from '../../manifest/types.js';
import type { Runner, RunRequest, RunResult } from '../types.js';
import { emptyResult } from '../types.js';
import { redeemPermit, type RunnerPermit } from '../permit.js';
import { IMAGE_TOOLS, MOUNTED_TOOLS, WATCHDOG_GRACE_MS, runPrepared, watchdogEntrypoint } from './call.js';
import type { CallOutcome } from './call.js';
import { DockerodeEngine } from './dockerode-engine.js';
import { engineMessage, engineRemedy, isNoEngine, noEngineLine } from './engine.js';
import type { ContainerSpec, DockerEngine, EngineInfo } from './engine.js';
import { ExecPool } from './exec-pool.js';
import { ImageBuilder } from './images.js';
import type { ImageProgress } from './images.js';
import { dockerIsolation } from './isolation.js';
import type { DockerIsolation } from './isolation.js';
import { CAPABILITY_LABEL, ROLE_LABEL, ownerLabels, processOwner } from './labels.js';
import type { Owner } from './labels.js';
import { PrewarmPool } from './pool.js';
import { RunnerVolumes } from './volumes.js';
import { reapOrphans } from './orphans.js';
import { cleanupOnProcessSignals } from './process-signals.js';
import { buildContainerSpec } from './spec.js';
import { openDockerEgress } from './egress.js';
import type { Resolver } from '../../network/egress.js';
import { assertGrantsUnprotected } from '../../project/protected-state.js';

export interface DockerRunnerOptions {
  /** Default: dockerode on DOCKER_HOST or the local socket. */
  engine?: DockerEngine | undefined;
  /** Default: an ImageBuilder on the same engine (runtimes/docker). */
  images?: ImageBuilder | undefined;
  /**
   * How capability files reach the container. `bind`: a read-only bind mount of the folder (local engine).
   * `copy`: a tar upload into a labelled volume (a remote engine cannot see host paths). Default `auto`:
   * copy when the engine is remote (DOCKER_HOST over TCP/SSH), bind otherwise.
   */
  capabilityFiles?: 'auto' | 'bind' | 'copy' | undefined;
  /**
   * Containers prepared ahead per configuration, from its second call on (0: create each on the call's
   * path). Default 1. `prewarm(capability)` prepares one before the first call.
   */
  prewarm?: number | undefined;
  /**
   * Start prepared containers ahead too, parked in the watchdog until their go line (capsule's own images
   * only: the watchdog needs busybox sh). Default true.
   */
  prestart?: boolean | undefined;
  /**
   * How long a started-ahead container may wait for its call before it exits on its own, and how long a warm
   * (exec pool) container lives at most: their deadline when capsule is gone or hung (an expired one is never
   * used). Default 300000 (5 minutes).
   */
  parkedIdleMs?: number | undefined;
  /** Configurations kept prewarmed at once. Default 8. */
  prewarmKeys?: number | undefined;
  /**
   * Reset-reusable containers (exec'd into, reset and verified between calls) for capabilities marked
   * `docker.reusable`. Default true; false runs them in fresh containers too.
   */
  execPool?: boolean | undefined;
  /** Reset-reusable containers per configuration at most (in use, resetting and ready). Default 8. */
  reusablePerKey?: number | undefined;
  /** CPU share per container, in cores. Default 1. */
  cpus?: number | undefined;
  /** The host environment (from openRuntime): DOCKER_HOST and granted variables are read from it. */
  env: NodeJS.ProcessEnv;
  /** Where `engine` answers, as errors name it. Default: env's DOCKER_HOST, else the local socket. */
  engineHost?: string | undefined;
  /** Project root, so fs grants are checked against capsule's own state again before each mount. */
  projectRoot?: string | undefined;
  /** capsule's per-user cache folder, never mounted either. */
  cacheDir?: string | undefined;
  /** capsule's per-user state folder (confirmed policies, audit heads, the key): never mounted. */
  stateDir?: string | undefined;
  /** Image build progress (a missing capsule image is built on demand). */
  onProgress?: ImageProgress | undefined;
  /** Remove this runner's containers when the process gets SIGINT/SIGTERM, then re-raise it. Default false. */
  handleProcessSignals?: boolean | undefined;
  /** How long `available()` and the first call wait for the engine. Default 5000 ms. */
  engineTimeoutMs?: number | undefined;
  /** How the egress proxy resolves granted host names. Default the system resolver (tests map names to loopback). */
  egressResolver?: Resolver | undefined;
}

/**
 * Runs docker capabilities in hardened, labelled, single-use containers (see docs/runners.md#docker).
 * Construct one per session; `close()` removes everything it created.
 */
export class DockerRunner implements Runner {
  readonly environment = 'docker' as const;
  private readonly engine: DockerEngine;
  private readonly images: ImageBuilder;
  private readonly owner: Owner;
  private readonly filesMode: 'auto' | 'bind' | 'copy';
  private readonly cpus: number;
  private readonly prestart: boolean;
  private readonly parkedIdleMs: number;
  private readonly hostEnv: NodeJS.ProcessEnv;
  private readonly engineHost: string;
  private readonly protectedScope: {
    projectRoot: string | undefined;
    cacheDir: string | undefined;
    stateDir: string | undefined;
  };
  private readonly onProgress: ImageProgress;
  private readonly engineTimeoutMs: number;
  private readonly egressResolver: Resolver | undefined;
  private readonly pool: PrewarmPool;
  private readonly execPool: ExecPool | undefined;
  /** Calls in flight: canceled by close(), which then waits for them to finish. */
  private readonly active = new Map<AbortController, Promise<unknown>>();
  /** Removals running in the background after a call returned; close() waits for them. */
  private readonly removals = new Map<string, Promise<boolean>>();
  /** Calls seen per configuration: prewarming starts with the second. */
  private readonly callsByKey = new Map<string, number>();
  /** The watchdog's busybox for other images, copies of capability folders for remote engines. */
  private readonly volumes: RunnerVolumes;
  private ready: Promise<EngineReach> | undefined;
  private info: Promise<EngineInfo> | undefined;
  /** The reap of dead processes' leftovers, started when the engine is first reached. */
  private reaping: Promise<void> | undefined;
  private closed = false;
  private readonly detachSignals: (() => void) | undefined;

  constructor(options: DockerRunnerOptions) {
    this.engine = options.engine ?? new DockerodeEngine({ env: options.env });
    this.images = options.images ?? new ImageBuilder({ engine: this.engine });
    this.owner = processOwner();
    this.filesMode = options.capabilityFiles ?? 'auto';
    this.cpus = options.cpus ?? 1;
    this.prestart = options.prestart ?? true;
    this.parkedIdleMs = options.parkedIdleMs ?? 300_000;
    this.hostEnv = options.env;
    this.engineHost = options.engineHost ?? options.env['DOCKER_HOST'] ?? '/var/run/docker.sock';
    this.protectedScope = {
      projectRoot: options.projectRoot,
      cacheDir: options.cacheDir,
      stateDir: options.stateDir,
    };
    this.onProgress = options.onProgress ?? (() => {});
    this.engineTimeoutMs = options.engineTimeoutMs ?? 5000;
    this.egressResolver = options.egressResolver;
    this.volumes = new RunnerVolumes(this.engine, this.images, this.owner, this.onProgress);
    this.pool = new PrewarmPool(this.engine, {
      perKey: options.prewarm ?? 1,
      // Never hand out a parked container about to expire: it could exit before its go line arrives.
      parkedMarginMs: Math.min(5000, (options.parkedIdleMs ?? 300_000) / 2),
      maxKeys: options.prewarmKeys ?? 8,
    });
    this.execPool =
      options.execPool === false
        ? undefined
        : new ExecPool(this.engine, {
            lifeMs: options.parkedIdleMs ?? 300_000,
            maxPerKey: options.reusablePerKey,
          });
    this.detachSignals =
      options.handleProcessSignals === true ? cleanupOnProcessSignals(() => this.close()) : undefined;
  }

  /** The effective isolation of a capability under this runner (pure; see isolation.ts). */
  isolation(capability: Capability): DockerIsolation {
    return dockerIsolation(capability);
  }

  async available(): Promise<{ ok: true } | { ok: false; reason: string }> {
    try {
      await this.engine.ping(this.engineTimeoutMs);
      return { ok: true };
    } catch (err) {
      return { ok: false, reason: unavailableReason(err, this.engineHost) };
    }
  }

  async run(request: RunRequest, permit: RunnerPermit): Promise<RunResult> {
    redeemPermit(permit, request.capability);
    try {
      return await this.runChecked(request);
    } catch (err) {
      if (err instanceof CapsuleError) throw err;
      // The engine failed mid-way (restarted, disk full…): still a clear error, never a stack trace.
      throw new CapsuleError(
        'RUNNER_FAILED',
        `the Docker engine failed during the run: ${engineMessage(err)}`,
        {
          file: request.capability.manifestPath,
          hint: 'check the engine (docker info) and try again',
        },
        { cause: err },
      );
    }
  }

  private async runChecked(request: RunRequest): Promise<RunResult> {
    const { capability } = request;
    if (this.closed) throw new CapsuleError('RUNNER_UNAVAILABLE', 'the docker runner was closed');
    this.checkRunnable(capability);
    const docker = capability.manifest.docker;
    if (docker === undefined) throw new Error('unreachable: checked by checkRunnable');
    // The image is looked up while the engine is first reached (one round trip instead of three in a row);
    // an engine that does not answer is the error reported, not the image.
    const image = this.images.ensure(docker.image, this.onProgress).then(
      () => undefined,
      (err: unknown) => ({ err }),
    );
    const info = await this.ensureEngine();
    if (docker.runtime !== 'runc' && !(await this.engineInfo()).runtimes.includes(docker.runtime)) {
      throw new CapsuleError('RUNNER_UNAVAILABLE', `the Docker engine has no "${docker.runtime}" runtime`, {
        file: capability.manifestPath,
        field: 'docker.runtime',
        hint: 'install gVisor (apt-get install runsc) and register it with dockerd (--add-runtime runsc=/usr/bin/runsc), or use "runc"',
      });
    }
    const failed = await image;
    if (failed !== undefined) {
      const { err } = failed;
      if (err instanceof CapsuleError)
        throw new CapsuleError(err.code, err.message, { ...err.details, file: capability.manifestPath });
      throw err;
    }
    await this.checkGrantedPaths(capability);
    // grants.network: this run's own proxy socket, closed (and its requests audited) when the run ends.
    const egress = await openDockerEgress(capability, {
      resolve: this.egressResolver,
      audit: request.egressAudit,
    });
    try {
      return await this.runWith(request, info, egress?.dir);
    } finally {
      await egress?.close();
    }
  }

  private async runWith(
    request: RunRequest,
    info: EngineReach,
    egressDir: string | undefined,
  ): Promise<RunResult> {
    const { capability } = request;
    const spec = await this.specFor(capability, info, egressDir);

    // close() may have run while we awaited the engine or an image build.
    if (this.closed) throw new CapsuleError('RUNNER_UNAVAILABLE', 'the docker runner was closed');
    // Timed from here: an image built on first use is not the capability's time.
    const started = performance.now();
    // close() cancels calls in flight through this, so they report `canceled` like an abort.
    const internal = new AbortController();
    const signal =
      request.signal === undefined ? internal.signal : AbortSignal.any([request.signal, internal.signal]);
    const call =
      this.resetReusable(capability) && this.execPool !== undefined
        ? this.execPool.run(
            specKey(spec),
            spec,
            capability,
            request.input,
            signal,
            this.ownImage(capability) ? IMAGE_TOOLS : MOUNTED_TOOLS,
          )
        : this.runFresh(spec, request, signal);
    this.active.set(internal, call);
    let outcome: CallOutcome;
    try {
      outcome = await call;
    } finally {
      this.active.delete(internal);
    }
    const { started: _started, ...fields } = outcome;
    return { ...emptyResult('docker'), ...fields, durationMs: Math.round(performance.now() - started) };
  }

  /**
   * The executor's hint that a call is being staged and judged: the engine is reached meanwhile (the ping, and
   * the reap of dead processes' leftovers beside it). Nothing is created and nothing runs before the call.
   */
  async warm(): Promise<void> {
    if (this.closed) return;
    await this.ensureEngine().catch(() => undefined);
  }

  /** Containers this runner prestarted that wait for a call (running, but nobody's load yet). */
  waitingContainers(): number {
    return this.pool.idleCount();
  }

  /** Prepare containers for `capability` ahead of its first call. */
  async prewarm(capability: Capability): Promise<void> {
    this.checkRunnable(capability);
    const info = await this.ensureEngine();
    const docker = capability.manifest.docker;
    // A network-granted run gets its own proxy socket mounted: nothing to prepare ahead.
    if (docker === undefined || capability.manifest.grants.network.length > 0) return;
    await this.images.ensure(docker.image, this.onProgress);
    const spec = await this.specFor(capability, info);
    this.pool.refill(specKey(spec), spec);
  }

  /**
   * Remove containers and volumes left by capsule processes that died on this host (crash, SIGKILL).
   * Runs once before the first call; returns how many objects were removed.
   */
  reapOrphans(): Promise<number> {
    return reapOrphans(this.engine, this.owner.host);
  }

  async close(): Promise<void> {
    if (this.closed) {
      await Promise.all([...this.removals.values()]);
      return;
    }
    const engineReached = this.ready !== undefined;
    this.closed = true;
    this.detachSignals?.();
    for (const controller of this.active.keys()) controller.abort();
    await Promise.allSettled([...this.active.values()]);
    await Promise.all([this.pool.close(), this.execPool?.close()]);
    // Anything of ours still there (e.g. a call that raced close()), listed while the removals after the last
    // calls finish: what one of them removed is not removed twice, what one failed to remove is removed now.
    // Not listed when the engine was never reached, so closing a runner that never ran does not wait on one.
    const removing = [...this.removals];
    const [leftovers] = await Promise.all([
      engineReached
        ? this.engine.listContainers([`capsule.instance=${this.owner.instance}`]).catch(() => [])
        : [],
      ...removing.map(([, removal]) => removal),
      this.reaping,
    ]);
    const removed = new Set<string>();
    for (const [id, removal] of removing) if (await removal) removed.add(id);
    await Promise.all(
      leftovers.filter((c) => !removed.has(c.id)).map((c) => this.engine.remove(c.id).catch(() => {})),
    );
    // After the containers: a volume still in use is not removable.
    await this.volumes.removeAll();
  }

  private async runFresh(
    spec: ContainerSpec,
    request: RunRequest,
    signal: AbortSignal,
  ): Promise<CallOutcome> {
    const key = specKey(spec);
    const limits = request.capability.manifest.limits;
    let prepared;
    try {
      prepared = await this.pool.take(key, spec);
    } catch (err) {
      throw new CapsuleError(
        'RUNNER_FAILED',
        `could not create the container: ${engineMessage(err)}`,
        {
          file: request.capability.manifestPath,
          field: 'docker',
        },
        { cause: err },
      );
    }
    request.onPlaced?.();
    // The next call's container is prepared while this one runs — from a configuration's second call on,
    // so a one-shot process (a single `capsule run`) never pays for a container it will not use.
    const calls = (this.callsByKey.get(key) ?? 0) + 1;
    if (this.callsByKey.size > 1000) this.callsByKey.clear();
    this.callsByKey.set(key, calls);
    if (calls >= 2) this.pool.refill(key, spec);
    const id = prepared.id;
    try {
      return await runPrepared(
        this.engine,
        prepared,
        request.input,
        { timeoutMs: limits.timeoutMs, outputBytes: limits.outputBytes },
        signal,
      );
    } finally {
      // The container has exited (or never started): remove it off the result's critical path.
      const removal = this.engine
        .remove(id)
        .then(
          () => true,
          () => false,
        )
        .finally(() => this.removals.delete(id));
      this.removals.set(id, removal);
    }
  }

  private checkRunnable(capability: Capability): void {
    if (capability.manifest.environment !== 'docker' || capability.manifest.docker === undefined) {
      throw new CapsuleError(
        'UNSUPPORTED',
        `${capability.name} is a ${capability.manifest.environment} capability, not a docker one`,
        {
          file: capability.manifestPath,
          field: 'environment',
        },
      );
    }
    const refusal = dockerIsolation(capability).refusals[0];
    if (refusal !== undefined) {
      throw new CapsuleError('UNSUPPORTED', `${capability.name}: ${refusal.field} ${refusal.message}`, {
        file: capability.manifestPath,
        field: refusal.field,
        hint: refusal.message,
      });
    }
  }

  /** Granted paths must still exist and must not be sockets (the engine's socket is root on the host). */
  private async checkGrantedPaths(capability: Capability): Promise<void> {
    // A bind mount writes straight to the host: capsule's own state is never one of them.
    await assertGrantsUnprotected(capability.fsGrants, {
      projectRoot: this.protectedScope.projectRoot,
      also: [this.protectedScope.cacheDir, this.protectedScope.stateDir],
      capabilityRoots: [capability.root],
      file: capability.manifestPath,
      deep: true,
    });
    for (const [i, grant] of capability.fsGrants.entries()) {
      // Every refusal names the grant's field in the manifest.
      const refuse = (code: CapsuleError['code'], message: string, hint?: string): CapsuleError =>
        new CapsuleError(code, message, {
          file: capability.manifestPath,
          field: `grants.fs[${i}].path`,
          ...(hint === undefined ? {} : { hint }),
        });
      let st;
      try {
        st = await lstat(grant.hostPath);
      } catch {
        throw refuse(
          'RUNNER_FAILED',
          `${grant.declared} does not exist any more`,
          'create it or remove the grant',
        );
      }
      if (st.isSymbolicLink()) {
        // hostPath was resolved by the loader: a link there now was swapped in since, and the
        // engine would follow it wherever it leads.
        throw refuse(
          'PERMISSION_DENIED',
          `${grant.declared} became a symlink since it was checked`,
          'Grant a real folder; capsule never mounts through a symlink.',
        );
      }
      if (st.isSocket()) {
        throw refuse(
          'UNSUPPORTED',
          `${grant.declared} is a socket; capsule never mounts sockets into a container`,
        );
      }
    }
  }

  private ensureEngine(): Promise<EngineReach> {
    if (this.ready === undefined) {
      const attempt = (async () => {
        try {
          // Known from the address, a runc call needs no GET /info; otherwise it goes beside the ping (the ping
          // bounds the wait for a hung engine, the info answers right behind it).
          const known = this.engine.reachedRemotely?.();
          const info = known === undefined ? this.engineInfo() : undefined;
          info?.catch(() => {});
          await this.engine.ping(this.engineTimeoutMs).catch((err: unknown) => {
            // A hung engine: a request sent beside the ping must not hold the process open.
            this.engine.disconnect?.();
            throw err;
          });
          const remote = known ?? (await (info ?? this.engineInfo())).remote;
          // Leftovers of dead processes are reaped beside the first call, not in front of it; close() waits.
          this.reaping ??= this.reapOrphans()
            .catch(() => 0)
            .then(() => undefined);
          return { remote };
        } catch (err) {
          // Nothing there at all: the one line says what to do. Anything else keeps its hint.
          throw new CapsuleError(
            'RUNNER_UNAVAILABLE',
            unavailableReason(err, this.engineHost),
            isNoEngine(err) ? {} : { hint: `if it is not running, ${engineRemedy()}` },
            { cause: err },
          );
        }
      })();
      this.ready = attempt;
      // A failed attempt is not cached: the next call tries again.
      attempt.catch(() => {
        if (this.ready === attempt) this.ready = undefined;
      });
    }
    return this.ready;
  }

  /** GET /info once (its runtimes: asked only for a call that names another runtime than runc). */
  private engineInfo(): Promise<EngineInfo> {
    if (this.info === undefined) {
      const asked = this.engine.info();
      this.info = asked;
      asked.catch(() => {
        if (this.info === asked) this.info = undefined;
      });
    }
    return this.info;
  }

  private async specFor(
    capability: Capability,
    info: EngineReach,
    egressDir?: string | undefined,
  ): Promise<ContainerSpec> {
    const copy = this.filesMode === 'copy' || (this.filesMode === 'auto' && info.remote);
    if (copy && capability.manifest.grants.network.length > 0) {
      throw new CapsuleError(
        'UNSUPPORTED',
        `${capability.name}: network grants need a local Docker engine (the egress proxy socket is a host path mounted into the container)`,
        { file: capability.manifestPath, field: 'grants.network' },
      );
    }
    if (copy && capability.fsGrants.length > 0) {
      throw new CapsuleError(
        'UNSUPPORTED',
        `${capability.name}: filesystem grants need a local Docker engine (host paths cannot be mounted into a remote one)`,
        {
          file: capability.manifestPath,
          field: 'grants.fs',
        },
      );
    }
    const reusable = this.resetReusable(capability) && this.execPool !== undefined;
    // capsule's images carry the watchdog's busybox sh; any other image gets it mounted in.
    const ownImage = this.ownImage(capability);
    const toolsVolume = ownImage ? undefined : await this.volumes.toolsVolume();
    const capabilityFiles = copy
      ? ({ type: 'volume', volume: await this.volumes.copyVolume(capability) } as const)
      : ({ type: 'bind', hostPath: capability.dir } as const);
    return buildContainerSpec(capability, {
      capabilityFiles,
      labels: { ...ownerLabels(this.owner), [CAPABILITY_LABEL]: capability.name, [ROLE_LABEL]: 'call' },
      hostEnv: this.hostEnv,
      cpus: this.cpus,
      // The exec pool puts its keep-alive there instead, and the watchdog in front of each exec.
      watchdog: reusable
        ? undefined
        : watchdogEntrypoint(
            capability.manifest.limits.timeoutMs + WATCHDOG_GRACE_MS,
            // Started ahead only in capsule's own images, whose busybox reads the go line.
            this.prestart && ownImage ? this.parkedIdleMs : undefined,
            ownImage ? IMAGE_TOOLS : MOUNTED_TOOLS,
          ),
      toolsVolume,
      egressDir,
    });
  }

  /** Calls share one container, reset and verified between them (see isolation.ts, exec-pool.ts). */
  private resetReusable(capability: Capability): boolean {
    return dockerIsolation(capability).mode === 'reset-reusable';
  }

  private ownImage(capability: Capability): boolean {
    return this.images.recipeFor(capability.manifest.docker?.image ?? '') !== undefined;
  }
}

/** What a call needs to know of its engine before its spec is made. */
interface EngineReach {
  /** Reached over TCP: capability files are copied in, not bind-mounted. */
  remote: boolean;
}

/** Same configuration → same key → interchangeable prewarmed containers. */
export function specKey(spec: ContainerSpec): string {
  return createHash('sha256').update(JSON.stringify(spec)).digest('hex');
}

function unavailableReason(err: unknown, where: string): string {
  const message = engineMessage(err);
  if (isNoEngine(err)) return noEngineLine(where);
  return `the Docker engine at ${where} is not usable: ${message}`;
}
