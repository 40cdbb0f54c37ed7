import { lstat, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../../base/errors.js';
import type { Capability } from '../../manifest/types.js';
import type { Runner, RunRequest, RunResult } from '../types.js';
import { emptyResult } from '../types.js';
import { redeemPermit, type RunnerPermit } from '../permit.js';
import { OutputDemuxer } from './demux.js';
import { judgePosture, parseProbeOutput, PROBE_SCRIPT, probeCapability } from './posture.js';
import type { MeasuredPosture, PostureVerdict } from './posture.js';
import { engineMessage } from './engine.js';
import type { DockerEngine, SwarmApi, SwarmConfigFile } from './engine.js';
import { dockerIsolation } from './isolation.js';
import { CAPABILITY_LABEL, MANAGED_LABEL, ROLE_LABEL, ownerLabels, processOwner } from './labels.js';
import type { Owner } from './labels.js';
import { CAPABILITY_MOUNT, SANDBOX_USER, containerCommand } from './spec.js';

/** Where the input document is mounted (a Swarm config) and read from by the wrapper. */
const INPUT_FILE = '/run/capsule-input';
/** PID 1 is docker-init (ContainerSpec.Init); the capability reads its input from the config file as stdin. */
const WRAPPER = `exec "$@" <${INPUT_FILE}`;
/** Task states after which nothing more happens. */
const FINAL = new Set(['complete', 'failed', 'shutdown', 'rejected', 'orphaned', 'remove']);
/** How often the task state is asked for while a call runs. */
const POLL_MS = 100;
/** Swarm configs hold at most 500 KB each; capability folders travel as one config per file. */
const MAX_FILE_BYTES = 500 * 1024;
const MAX_FILES = 64;

/** One node of a swarm as the posture probe found it. */
export interface SwarmNodeMeasurement {
  id: string;
  hostname: string;
  /** The node object's version index when it was measured. */
  version: number;
  posture: MeasuredPosture | undefined;
  verdict: PostureVerdict;
}

export interface SwarmRunnerOptions {
  /** A manager of the swarm (the Engine API with its Swarm part). */
  manager: DockerEngine & SwarmApi;
  /** CPU share per task, in cores. Default 1. */
  cpus?: number | undefined;
}

/**
 * Docker capabilities as one-shot replicated services on a Swarm cluster (docs/scale-out.md): Replicas 1 and
 * restart condition none (removing a job-mode service does not stop its task), the input and the capability's
 * files as Swarm configs (no host path is mounted: the task may run on any node), output from the service log,
 * the exit code from the task status, timeout and cancel by removing the service. Every object is labelled
 * with its owner and removed after the call.
 */
export class SwarmRunner implements Runner {
  readonly environment = 'docker' as const;
  private readonly manager: DockerEngine & SwarmApi;
  private readonly owner: Owner;
  private readonly cpus: number;
  private readonly active = new Set<AbortController>();
  private closed = false;
  private seq = 0;
  /** The nodes measured (measureNodes): calls are placed on these only. */
  private measured: SwarmNodeMeasurement[] | undefined;
  /** The measurement under way: callers that start together share it (each node is probed once). */
  private measuring: Promise<SwarmNodeMeasurement[]> | undefined;

  constructor(options: SwarmRunnerOptions) {
    this.manager = options.manager;
    this.cpus = options.cpus ?? 1;
    this.owner = processOwner();
  }

  async available(): Promise<{ ok: true } | { ok: false; reason: string }> {
    try {
      await this.manager.ping(5000);
      const nodes = await this.manager.nodes();
      if (!nodes.some((n) => n.state === 'ready'))
        return { ok: false, reason: 'no node of the swarm is ready' };
      return { ok: true };
    } catch (err) {
      return { ok: false, reason: `the swarm manager does not answer: ${engineMessage(err)}` };
    }
  }

  async run(request: RunRequest, permit: RunnerPermit): Promise<RunResult> {
    redeemPermit(permit, request.capability);
    // Measured: the call goes to a node whose posture was measured (never one that joined since), by placement.
    const measured = this.measured;
    if (measured === undefined) return this.call(request, {});
    const changed = await this.nodesChanged();
    if (changed !== undefined)
      throw new CapsuleError('RUNNER_FAILED', `${changed}; the call was not run`, {
        file: request.capability.manifestPath,
        hint: 'run it again: the swarm is measured again first',
      });
    if (measured.length === 0)
      throw new CapsuleError('RUNNER_UNAVAILABLE', 'no node of the swarm was ready when it was measured', {
        file: request.capability.manifestPath,
        hint: 'check the swarm (docker node ls on a manager) and run it again',
      });
    const eligible = measured.filter((n) => request.requireSandboxed !== true || n.verdict.sandboxed);
    const node = eligible[this.seq % Math.max(1, eligible.length)];
    if (node === undefined) {
      const weak = measured.map((n) => `node ${n.hostname || n.id}: ${n.verdict.missing.join(', ')}`);
      throw new CapsuleError(
        'PERMISSION_DENIED',
        `the call was allowed as sandboxed, but no node of the swarm measures so (${weak.join('; ')}); it was not run`,
        { file: request.capability.manifestPath, key: `run_capability:${request.capability.name}` },
      );
    }
    return this.call(request, { constraints: [`node.id==${node.id}`] });
  }

  /**
   * The posture probe as a call on each ready node (a service pinned to it): why this swarm is not a sandbox
   * on some node, or undefined when every node gives everything (see posture.ts). From then on calls run on
   * these nodes only, each placed on one of them.
   */
  async measureIsolation(): Promise<string | undefined> {
    // Measured already and no node changed since: that measurement still describes where calls go.
    const kept = this.measured;
    const nodes =
      kept !== undefined && this.measuring === undefined && (await this.nodesChanged()) === undefined
        ? kept
        : await this.measureNodes();
    if (nodes.length === 0) return 'no node of the swarm is ready, nothing was measured';
    const weak = nodes
      .filter((n) => !n.verdict.sandboxed)
      .map((n) => `node ${n.hostname || n.id}: ${n.verdict.missing.join(', ')}`);
    return weak.length === 0 ? undefined : weak.join('; ');
  }

  /**
   * Each ready node measured by a probe pinned to it (all nodes at once); what calls are placed on afterwards.
   * Callers that start while a measurement is under way get that one: each node is probed once.
   */
  measureNodes(): Promise<SwarmNodeMeasurement[]> {
    if (this.measuring !== undefined) return this.measuring;
    const job = this.probeNodes().finally(() => {
      if (this.measuring === job) this.measuring = undefined;
    });
    this.measuring = job;
    return job;
  }

  private async probeNodes(): Promise<SwarmNodeMeasurement[]> {
    const nodes = (await this.manager.nodes()).filter((n) => n.state === 'ready');
    const out = await Promise.all(
      nodes.map(async (node): Promise<SwarmNodeMeasurement> => {
        const measured = await this.call(
          { capability: probeCapability('runc'), input: '' },
          {
            constraints: [`node.id==${node.id}`],
            files: [
              { target: `${CAPABILITY_MOUNT}/probe.sh`, data: Buffer.from(`#!/bin/sh\n${PROBE_SCRIPT}\n`) },
            ],
          },
        ).then(
          (r): Pick<SwarmNodeMeasurement, 'posture' | 'verdict'> => {
            if (r.exitCode !== 0)
              return {
                posture: undefined,
                verdict: {
                  sandboxed: false,
                  missing: [`the posture probe exited ${r.exitCode ?? 'without a code'}`],
                },
              };
            const posture = parseProbeOutput(r.stdout, 'runc');
            return { posture, verdict: judgePosture(posture) };
          },
          (err: unknown) => ({
            posture: undefined,
            verdict: { sandboxed: false, missing: [`posture not measured (${(err as Error).message})`] },
          }),
        );
        return { id: node.id, hostname: node.hostname, version: node.version, ...measured };
      }),
    );
    this.measured = out;
    return out;
  }

  /**
   * Why the nodes measured are not the ones that would run a call now, or undefined: a measured node changed
   * (its version index moves when it leaves, comes back or is updated: a restarted node daemon) or is not
   * ready, or a node joined. One GET /nodes.
   */
  async nodesChanged(): Promise<string | undefined> {
    const measured = this.measured;
    if (measured === undefined) return 'the swarm was not measured';
    const now = await this.manager.nodes();
    for (const m of measured) {
      const n = now.find((x) => x.id === m.id);
      if (n === undefined || n.state !== 'ready' || n.version !== m.version)
        return `node ${m.hostname || m.id} of the swarm changed since its posture was measured`;
    }
    const joined = now.filter((n) => n.state === 'ready' && !measured.some((m) => m.id === n.id));
    if (joined.length > 0)
      return `node ${joined.map((n) => n.hostname || n.id).join(', ')} joined the swarm since it was measured`;
    return undefined;
  }

  private async call(
    request: RunRequest,
    options: {
      constraints?: string[] | undefined;
      files?: Array<{ target: string; data: Buffer }> | undefined;
    },
  ): Promise<RunResult> {
    if (this.closed) throw new CapsuleError('RUNNER_UNAVAILABLE', 'the swarm runner was closed');
    const { capability } = request;
    const refusal = this.refusal(capability);
    if (refusal !== undefined) throw refusal;
    const internal = new AbortController();
    this.active.add(internal);
    const signal =
      request.signal === undefined ? internal.signal : AbortSignal.any([request.signal, internal.signal]);
    const labels = {
      ...ownerLabels(this.owner),
      [CAPABILITY_LABEL]: capability.name,
      [ROLE_LABEL]: 'swarm-call',
    };
    const name = `capsule-${this.owner.instance}-${++this.seq}`;
    const configs: string[] = [];
    let serviceId: string | undefined;
    try {
      const files = options.files ?? (await this.capabilityFiles(capability));
      const mounted: SwarmConfigFile[] = [];
      // A config cannot be empty: an empty input is no config, and stdin is /dev/null.
      if (request.input !== '') {
        const input = await this.manager.createConfig(`${name}-input`, Buffer.from(request.input), labels);
        configs.push(input);
        mounted.push({ configId: input, configName: `${name}-input`, target: INPUT_FILE, mode: 0o444 });
      }
      for (const [i, f] of files.entries()) {
        const id = await this.manager.createConfig(`${name}-f${i}`, f.data, labels);
        configs.push(id);
        mounted.push({ configId: id, configName: `${name}-f${i}`, target: f.target, mode: 0o555 });
      }
      const limits = capability.manifest.limits;
      const started = performance.now();
      serviceId = await this.manager.createService({
        name,
        labels,
        image: capability.manifest.docker?.image ?? '',
        command: [
          '/bin/sh',
          '-c',
          request.input === '' ? 'exec "$@" </dev/null' : WRAPPER,
          'capsule-swarm',
          ...containerCommand(capability),
        ],
        workingDir: CAPABILITY_MOUNT,
        user: SANDBOX_USER,
        env: ['HOME=/tmp', `CAPSULE_CAPABILITY=${capability.name}`],
        readOnly: true,
        init: true,
        capDrop: ['ALL'],
        configs: mounted,
        tmpfs: [{ target: '/tmp', sizeBytes: Math.min(64, limits.memoryMb) * 1024 * 1024, mode: 0o1777 }],
        nanoCpus: Math.round(this.cpus * 1e9),
        memoryBytes: limits.memoryMb * 1024 * 1024,
        pids: limits.pids,
        constraints: options.constraints,
      });
      let timedOut = false;
      let canceled = false;
      let task;
      for (;;) {
        task = (await this.manager.serviceTasks(serviceId))[0];
        if (task !== undefined && FINAL.has(task.state)) break;
        if (signal.aborted) {
          canceled = true;
          break;
        }
        if (performance.now() - started > limits.timeoutMs) {
          timedOut = true;
          break;
        }
        await new Promise((r) => setTimeout(r, POLL_MS));
      }
      const durationMs = Math.round(performance.now() - started);
      if (timedOut || canceled) {
        // Removing a replicated service stops its task (StopGracePeriod 0: SIGKILL at once).
        await this.manager.removeService(serviceId);
        serviceId = undefined;
        return { ...emptyResult('docker'), exitCode: null, timedOut, canceled, durationMs };
      }
      if (task?.state === 'rejected' || (task?.state === 'failed' && task.exitCode === null)) {
        throw new CapsuleError('RUNNER_FAILED', `the swarm rejected the task: ${task.message}`, {
          file: capability.manifestPath,
          hint: 'check that every node has the image (no registry: load it on each node) and the swarm is healthy',
        });
      }
      const demux = new OutputDemuxer(limits.outputBytes, () => {});
      demux.push(await this.manager.serviceLogs(serviceId));
      const exitCode = task?.exitCode ?? null;
      return {
        ...emptyResult('docker'),
        exitCode,
        signal: exitCode === 137 ? 'SIGKILL' : null,
        stdout: demux.stdout(),
        stderr: demux.stderr(),
        truncated: demux.truncated,
        durationMs,
      };
    } catch (err) {
      if (err instanceof CapsuleError) throw err;
      throw new CapsuleError(
        'RUNNER_FAILED',
        `the swarm failed during the run: ${engineMessage(err)}`,
        {
          file: capability.manifestPath,
          hint: 'check the swarm (docker node ls on a manager) and try again',
        },
        { cause: err },
      );
    } finally {
      this.active.delete(internal);
      if (serviceId !== undefined) await this.manager.removeService(serviceId).catch(() => {});
      await this.removeConfigs(configs);
    }
  }

  /** Remove every service and config this process left on the swarm (crash, SIGKILL) — and this runner's. */
  async reap(): Promise<number> {
    const mine = [`${MANAGED_LABEL}=1`, `capsule.pid=${this.owner.pid}`];
    const services = await this.manager.listServices(mine);
    await Promise.all(services.map((s) => this.manager.removeService(s).catch(() => {})));
    const configs = await this.manager.listConfigs(mine);
    await this.removeConfigs(configs);
    return services.length + configs.length;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const c of this.active) c.abort();
  }

  private refusal(capability: Capability): CapsuleError | undefined {
    const docker = capability.manifest.docker;
    if (capability.manifest.environment !== 'docker' || docker === undefined)
      return new CapsuleError('UNSUPPORTED', `${capability.name} is not a docker capability`, {
        file: capability.manifestPath,
        field: 'environment',
      });
    const first = dockerIsolation(capability).refusals[0];
    if (first !== undefined)
      return new CapsuleError('UNSUPPORTED', `${capability.name}: ${first.field} ${first.message}`, {
        file: capability.manifestPath,
        field: first.field,
      });
    // What a service cannot be given is refused, never dropped silently.
    const why =
      capability.fsGrants.length > 0
        ? ['grants.fs', 'host paths cannot be mounted into a swarm task (it may run on any node)']
        : docker.runtime !== 'runc'
          ? ['docker.runtime', 'a swarm service cannot pick a runtime (the node daemon’s default runs it)']
          : capability.manifest.grants.env.length > 0
            ? ['grants.env', 'host variables are not passed to swarm tasks']
            : docker.reusable === true
              ? ['docker.reusable', 'swarm calls are one-shot services']
              : undefined;
    if (why === undefined) return undefined;
    return new CapsuleError('UNSUPPORTED', `${capability.name}: ${why[0]}: ${why[1]}`, {
      file: capability.manifestPath,
      field: why[0],
    });
  }

  /** The capability folder as config files (regular files only; a symlink is never followed). */
  private async capabilityFiles(capability: Capability): Promise<Array<{ target: string; data: Buffer }>> {
    const out: Array<{ target: string; data: Buffer }> = [];
    const walk = async (dir: string, rel: string): Promise<void> => {
      for (const entry of await readdir(dir, { withFileTypes: true })) {
        const abs = path.join(dir, entry.name);
        const relPath = rel === '' ? entry.name : `${rel}/${entry.name}`;
        const st = await lstat(abs);
        if (st.isDirectory()) await walk(abs, relPath);
        else if (st.isFile()) {
          if (st.size === 0 || st.size > MAX_FILE_BYTES || out.length >= MAX_FILES) {
            throw new CapsuleError(
              'UNSUPPORTED',
              `${capability.name}: ${relPath} does not fit a swarm call (at most ${MAX_FILES} files, each 1 byte to 500 KB: Swarm configs cannot be empty)`,
              { file: capability.manifestPath },
            );
          }
          out.push({ target: path.posix.join(CAPABILITY_MOUNT, relPath), data: await readFile(abs) });
        } else {
          throw new CapsuleError(
            'UNSUPPORTED',
            `${capability.name}: ${relPath} is not a regular file; a swarm call carries regular files only`,
            { file: capability.manifestPath },
          );
        }
      }
    };
    await walk(capability.dir, '');
    return out;
  }

  /** A config is in use until its task is gone: asked again for a little while. */
  private async removeConfigs(ids: readonly string[]): Promise<void> {
    for (const id of ids) {
      for (let attempt = 0; attempt < 50; attempt++) {
        try {
          await this.manager.removeConfig(id);
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    }
  }
}
