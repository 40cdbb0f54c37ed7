import Docker from 'dockerode';
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../project/state-key.js';
import { realpath, stat } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import type { Duplex, Readable } from 'node:stream';
import { pinnedConnections } from './engine-pin.js';
import type { PinnedConnections } from './engine-pin.js';
import type {
  BuildProgress,
  ContainerSpec,
  ContainerState,
  ContainerSummary,
  DockerEngine,
  EngineEvent,
  EngineIdentity,
  EngineInfo,
  EnginePin,
  PidsHits,
  SwarmApi,
  SwarmServiceSpec,
  SwarmTask,
} from './engine.js';

import { engineMessage } from './engine.js';
import { containerPidsHits } from './pids-events.js';

export { engineMessage };

interface EngineConnection {
  /** Unix socket path; default: DOCKER_HOST when set, else /var/run/docker.sock. */
  socketPath?: string | undefined;
  /** Environment to read DOCKER_HOST from (the composition root's; never read from the process here). */
  env?: NodeJS.ProcessEnv | undefined;
  /** An engine named in capsule's config (unix:///path or tcp://host:port); overrides DOCKER_HOST. */
  host?: string | undefined;
  /** Mutual TLS material (PEM contents) for a tcp:// host: spoken as https, the engine's certificate checked. */
  tls?: { ca: Buffer; cert: Buffer; key: Buffer } | undefined;
}

/** Where the engine is: a named host or socket, or the environment whose DOCKER_HOST says it. */
export type DockerodeEngineOptions = EngineConnection &
  ({ env: NodeJS.ProcessEnv } | { host: string } | { socketPath: string });

/** While a container runs, how often its engine is asked whether it still answers, and how long it may take. */
const WAIT_PING_EVERY_MS = 1000;
const WAIT_PING_TIMEOUT_MS = 5000;

/** Status codes the Engine API answers with, carried on dockerode's errors. */
function statusOf(err: unknown): number | undefined {
  const code = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

/** Runs a removal; an object already gone (404) is what was asked for. */
async function removeIfPresent(remove: () => Promise<unknown>): Promise<void> {
  try {
    await remove();
  } catch (err) {
    if (statusOf(err) !== 404) throw err;
  }
}

/**
 * dockerode behind our DockerEngine interface. Only this file imports dockerode, so its
 * callback-or-promise overloads and loose typings stay here.
 */
/**
 * dockerode's own DOCKER_HOST lookup reads process.env; the injected environment decides here.
 * unix:// → a socket path; tcp:// / http(s):// → host and port; anything else → dockerode's defaults.
 */
function connectionOptions(
  socketPath: string | undefined,
  host: string | undefined,
): Docker.DockerOptions | undefined {
  if (socketPath !== undefined) return { socketPath };
  if (host === undefined || host === '') return { socketPath: '/var/run/docker.sock' };
  if (host.startsWith('unix://')) return { socketPath: host.slice('unix://'.length) };
  if (/^(tcp|https?):\/\//.test(host)) {
    const url = new URL(host.replace(/^tcp:/, 'http:'));
    return {
      host: url.hostname,
      port: url.port === '' ? 2375 : Number(url.port),
      protocol: url.protocol === 'https:' ? 'https' : 'http',
    };
  }
  return undefined;
}

/** The /info fields a daemon's configuration shows in (not its counters or clock), hashed. */
const CONFIG_FIELDS = [
  'Runtimes',
  'DefaultRuntime',
  'SecurityOptions',
  'InitBinary',
  'InitCommit',
  'RuncCommit',
  'ContainerdCommit',
  'CgroupDriver',
  'CgroupVersion',
  'Driver',
  'KernelVersion',
  'OperatingSystem',
  'LiveRestoreEnabled',
  'Isolation',
  'Labels',
  'ExperimentalBuild',
  'ServerVersion',
  'DockerRootDir',
  'ID',
  'Name',
] as const;

function configFingerprint(info: Record<string, unknown>): string {
  const picked = Object.fromEntries(CONFIG_FIELDS.map((k) => [k, info[k] ?? null]));
  return `sha256:${createHash('sha256').update(canonicalJson(picked)).digest('hex')}`;
}

export class DockerodeEngine implements DockerEngine, SwarmApi {
  private readonly docker: Docker;
  private readonly remote: boolean;
  private readonly options: DockerodeEngineOptions;
  private readonly where: string;
  private readonly socketPath: string | undefined;
  private readonly connections: PinnedConnections | undefined;
  private pinned: Promise<EnginePin> | undefined;

  constructor(options: DockerodeEngineOptions) {
    this.options = options;
    const host = options.host ?? options.env?.['DOCKER_HOST'];
    this.remote =
      options.socketPath === undefined && host !== undefined && host !== '' && !host.startsWith('unix://');
    const connection = connectionOptions(options.socketPath, host);
    this.socketPath = connection?.socketPath;
    this.where =
      this.socketPath !== undefined
        ? `unix://${this.socketPath}`
        : host === undefined
          ? 'the default engine'
          : host;
    const tls = options.tls !== undefined && connection !== undefined;
    // Every request goes through connections that can be bound to one daemon (pin()).
    this.connections = connection === undefined ? undefined : pinnedConnections({ tls, where: this.where });
    const agent = this.connections === undefined ? {} : { agent: this.connections.agent };
    this.docker = new Docker(
      connection === undefined
        ? connection
        : tls
          ? { ...connection, protocol: 'https', ...options.tls, ...agent }
          : { ...connection, ...agent },
    );
  }

  another(): DockerodeEngine {
    return new DockerodeEngine(this.options);
  }

  disconnect(): void {
    this.connections?.agent.destroy();
  }

  get address(): string {
    return this.where;
  }

  pin(canary: {
    name: string;
    labels: Record<string, string>;
    keep?: boolean | undefined;
  }): Promise<EnginePin> {
    this.pinned ??= this.makePin(canary.name, { labels: canary.labels, keep: canary.keep === true });
    return this.pinned;
  }

  async resumePin(canary: { name: string }): Promise<EnginePin | undefined> {
    if (this.pinned !== undefined) return this.pinned;
    // Asked before anything is armed: a daemon without it leaves this engine free to be pinned afresh.
    if (this.connections === undefined) return undefined;
    try {
      await this.docker.getVolume(canary.name).inspect();
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw err;
    }
    this.pinned ??= this.makePin(canary.name, { keep: true });
    return this.pinned;
  }

  async events(options: {
    since: number;
    until: number;
    filters: Record<string, string[]>;
  }): Promise<EngineEvent[]> {
    const stream = (await this.docker.getEvents({
      // Seconds with a fraction: the daemon reads the digits after the point as a fraction of a second.
      since: Math.round(options.since * 1000) / 1000,
      until: Math.round(options.until * 1000) / 1000,
      filters: JSON.stringify(options.filters),
    })) as unknown as AsyncIterable<Buffer>;
    let text = '';
    for await (const chunk of stream) text += chunk.toString('utf8');
    const found: EngineEvent[] = [];
    for (const line of text.split('\n')) {
      if (line.trim() === '') continue;
      const e = JSON.parse(line) as { Type?: unknown; Action?: unknown; Actor?: { ID?: unknown } };
      found.push({
        type: typeof e.Type === 'string' ? e.Type : '',
        action: typeof e.Action === 'string' ? e.Action : '',
        id: typeof e.Actor?.ID === 'string' ? e.Actor.ID : '',
      });
    }
    return found;
  }

  private async makePin(
    canary: string,
    options: { labels?: Record<string, string>; keep: boolean },
  ): Promise<EnginePin> {
    const connections = this.connections;
    if (connections === undefined) throw new Error(`cannot bind the engine at ${this.where} to its daemon`);
    const socketNow = async (): Promise<EngineIdentity['socket']> => {
      if (this.socketPath === undefined) return undefined;
      const st = await stat(this.socketPath);
      return { path: this.socketPath, realPath: await realpath(this.socketPath), dev: st.dev, ino: st.ino };
    };
    /** Whether the socket path still leads to the socket `was` (a stat: ~15 µs, no request). */
    const sameSocket = async (was: NonNullable<EngineIdentity['socket']>): Promise<boolean> => {
      const st = await stat(was.path).catch(() => undefined);
      return st !== undefined && st.dev === was.dev && st.ino === was.ino;
    };
    const before = await socketNow();
    if (options.labels !== undefined)
      await this.docker.createVolume({ Name: canary, Labels: options.labels });
    // From here on only the daemon that holds the canary gets a request: what is read and measured next is its.
    connections.arm(canary);
    let released = false;
    let watch: IncomingMessage | undefined;
    try {
      watch = (await this.docker.getEvents({ filters: { type: ['daemon'] } })) as unknown as IncomingMessage;
      // The watch is how a restart or reload is seen; it must not keep a process alive.
      watch.socket?.unref();
      const lost = (why: string): void => {
        if (!released) connections.lose(why);
      };
      watch.on('data', (chunk: Buffer) => {
        const action = /"Action":"([^"]*)"/.exec(chunk.toString('utf8'))?.[1] ?? 'an event';
        lost(`the daemon at ${this.where} reported "${action}" (its configuration may have changed)`);
      });
      watch.on('error', () => lost(`the connection to the daemon at ${this.where} failed`));
      watch.on('close', () => lost(`the daemon at ${this.where} went away (restarted or stopped)`));
      const info = (await this.docker.info()) as Record<string, unknown> & {
        ID?: string;
        Name?: string;
        DockerRootDir?: string;
        ServerVersion?: string;
      };
      const socket = await socketNow();
      if (before !== undefined && (socket?.dev !== before.dev || socket.ino !== before.ino))
        connections.lose(`the socket ${this.socketPath ?? ''} was re-pointed while the engine was measured`);
      const identity: EngineIdentity = {
        id: info.ID ?? '',
        name: info.Name ?? '',
        rootDir: info.DockerRootDir ?? '',
        serverVersion: info.ServerVersion ?? 'unknown',
        host: this.where,
        socket,
        canary,
        config: configFingerprint(info),
      };
      const check = async (): Promise<string | undefined> => {
        const why = connections.lost();
        if (why !== undefined || socket === undefined) return why;
        if (!(await sameSocket(socket))) {
          const now = await realpath(socket.path).catch(() => 'nothing');
          connections.lose(`the socket ${socket.path} leads to another socket now (${now})`);
        }
        return connections.lost();
      };
      return {
        identity,
        check,
        lose: (why) => connections.lose(why),
        release: async () => {
          if (released) return;
          released = true;
          watch?.destroy();
          if (connections.lost() === undefined && !options.keep)
            await removeIfPresent(() => this.docker.getVolume(canary).remove({ force: true })).catch(
              () => {},
            );
        },
      };
    } catch (err) {
      released = true;
      watch?.destroy();
      if (!options.keep)
        await removeIfPresent(() => this.docker.getVolume(canary).remove({ force: true })).catch(() => {});
      throw err;
    }
  }

  async info(): Promise<EngineInfo> {
    const info = (await this.docker.info()) as { ServerVersion?: string; Runtimes?: Record<string, unknown> };
    return {
      serverVersion: info.ServerVersion ?? 'unknown',
      runtimes: Object.keys(info.Runtimes ?? {}),
      remote: this.remote,
    };
  }

  async ping(timeoutMs: number): Promise<void> {
    // A hung engine (socket accepts, never answers) must not hang the caller: race a timer.
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the Docker engine did not answer within ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([this.docker.ping() as Promise<unknown>, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async createContainer(spec: ContainerSpec): Promise<string> {
    const container = await this.docker.createContainer({
      Image: spec.image,
      ...(spec.entrypoint !== undefined ? { Entrypoint: spec.entrypoint } : {}),
      Cmd: spec.cmd,
      WorkingDir: spec.workingDir,
      User: spec.user,
      Env: spec.env,
      Labels: spec.labels,
      AttachStdin: spec.openStdin,
      AttachStdout: true,
      AttachStderr: true,
      OpenStdin: spec.openStdin,
      StdinOnce: spec.openStdin,
      Tty: false,
      NetworkDisabled: spec.networkDisabled,
      HostConfig: {
        Runtime: spec.runtime,
        NetworkMode: spec.networkMode,
        PidMode: spec.pidMode,
        IpcMode: spec.ipcMode,
        Privileged: spec.privileged,
        ReadonlyRootfs: spec.readonlyRootfs,
        CapDrop: spec.capDrop,
        CapAdd: spec.capAdd,
        SecurityOpt: spec.securityOpt,
        Memory: spec.memoryBytes,
        MemorySwap: spec.memorySwapBytes,
        PidsLimit: spec.pidsLimit,
        NanoCpus: spec.nanoCpus,
        Ulimits: spec.ulimits.map((u) => ({ Name: u.name, Soft: u.soft, Hard: u.hard })),
        Tmpfs: spec.tmpfs,
        Mounts: spec.mounts.map((m) => ({
          Type: m.type,
          Source: m.source,
          Target: m.target,
          ReadOnly: m.readOnly,
        })),
        ...(spec.sysctls !== undefined ? { Sysctls: spec.sysctls } : {}),
        LogConfig: { Type: spec.logDriver, Config: {} },
        AutoRemove: false,
      },
    });
    return container.id;
  }

  async attach(id: string): Promise<Duplex> {
    const stream = await this.docker
      .getContainer(id)
      .attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true });
    return stream as unknown as Duplex;
  }

  async start(id: string): Promise<void> {
    await this.docker.getContainer(id).start();
  }

  async wait(id: string): Promise<number> {
    // A wait outlives the container's whole run, and when the engine dies meanwhile dockerode's request is
    // neither answered nor failed (measured: a SIGKILLed dockerd left it pending forever). The engine is asked
    // again while it lasts, so a dead or hung engine fails the call instead of hanging it.
    let timer: NodeJS.Timeout | undefined;
    let done = false;
    const watch = new Promise<never>((_, reject) => {
      const tick = (): void => {
        this.ping(WAIT_PING_TIMEOUT_MS).then(
          () => {
            if (!done) timer = setTimeout(tick, WAIT_PING_EVERY_MS);
          },
          (err: unknown) =>
            reject(new Error(`the Docker engine stopped answering during the call (${engineMessage(err)})`)),
        );
      };
      timer = setTimeout(tick, WAIT_PING_EVERY_MS);
    });
    try {
      const result = (await Promise.race([this.docker.getContainer(id).wait(), watch])) as {
        StatusCode?: number;
      };
      return result.StatusCode ?? -1;
    } finally {
      done = true;
      clearTimeout(timer);
    }
  }

  async inspect(id: string): Promise<ContainerState> {
    const info = await this.docker.getContainer(id).inspect();
    return { running: info.State.Running, exitCode: info.State.ExitCode, oomKilled: info.State.OOMKilled };
  }

  async pidsHits(id: string): Promise<PidsHits | undefined> {
    if (this.remote) return undefined;
    const info = await this.docker.getContainer(id).inspect();
    if (!info.State.Running) return undefined;
    return containerPidsHits(info.State.Pid, info.Id);
  }

  async processes(id: string): Promise<number[]> {
    const top = (await this.docker.getContainer(id).top({ ps_args: '-o pid' })) as {
      Titles?: string[];
      Processes?: string[][];
    };
    const at = (top.Titles ?? []).indexOf('PID');
    if (at < 0) throw new Error('the engine listed the container processes without a PID column');
    return (top.Processes ?? []).map((row) => Number(row[at]));
  }

  async kill(id: string): Promise<void> {
    try {
      await this.docker.getContainer(id).kill({ signal: 'SIGKILL' });
    } catch (err) {
      // 409: not running any more (it exited on its own meanwhile); 404: already gone.
      const status = statusOf(err);
      if (status !== 409 && status !== 404) throw err;
    }
  }

  async remove(id: string): Promise<void> {
    try {
      await this.docker.getContainer(id).remove({ force: true, v: true });
    } catch (err) {
      // 404: gone; 409: removal already in progress.
      const status = statusOf(err);
      if (status !== 404 && status !== 409) throw err;
    }
  }

  async listContainers(labelFilters: string[]): Promise<ContainerSummary[]> {
    const list = await this.docker.listContainers({ all: true, filters: { label: labelFilters } });
    return list.map((c) => ({ id: c.Id, labels: c.Labels ?? {}, state: c.State }));
  }

  async putArchive(id: string, path: string, tar: Readable): Promise<void> {
    await this.docker.getContainer(id).putArchive(tar, { path });
  }

  async exec(
    id: string,
    options: { cmd: string[]; user: string; workingDir: string; env: string[] },
  ): Promise<{ execId: string; stream: Duplex }> {
    const exec = await this.docker.getContainer(id).exec({
      Cmd: options.cmd,
      User: options.user,
      WorkingDir: options.workingDir,
      Env: options.env,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
    });
    const stream = await exec.start({ hijack: true, stdin: true, Tty: false });
    return { execId: exec.id, stream: stream as unknown as Duplex };
  }

  async execExitCode(execId: string): Promise<number | null> {
    const info = await this.docker.getExec(execId).inspect();
    return info.Running ? null : (info.ExitCode ?? null);
  }

  async createVolume(name: string, labels: Record<string, string>): Promise<void> {
    await this.docker.createVolume({ Name: name, Labels: labels });
  }

  async removeVolume(name: string): Promise<void> {
    await removeIfPresent(() => this.docker.getVolume(name).remove({ force: true }));
  }

  async listVolumes(labelFilters: string[]): Promise<string[]> {
    const result = await this.docker.listVolumes({ filters: { label: labelFilters } });
    return (result.Volumes ?? []).map((v) => v.Name);
  }

  async imageInfo(
    ref: string,
  ): Promise<{ id: string; tags: string[]; labels: Record<string, string> } | undefined> {
    try {
      const info = await this.docker.getImage(ref).inspect();
      const tags = (info.RepoTags ?? []).filter((t) => t !== '<none>:<none>');
      return { id: info.Id, tags, labels: info.Config?.Labels ?? {} };
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw err;
    }
  }

  async imageExists(ref: string): Promise<boolean> {
    try {
      await this.docker.getImage(ref).inspect();
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw err;
    }
  }

  async buildImage(
    context: Readable,
    options: { tag: string; labels: Record<string, string> },
    onProgress: (p: BuildProgress) => void,
  ): Promise<void> {
    const buildOptions: Docker.ImageBuildOptions = {
      t: options.tag,
      labels: options.labels,
      rm: true,
      forcerm: true,
      // No registry is reachable: never try to pull a base image.
      pull: false,
    };
    const stream: NodeJS.ReadableStream = await this.docker.buildImage(
      context as NodeJS.ReadableStream,
      buildOptions,
    );
    await new Promise<void>((resolve, reject) => {
      let buffered = '';
      let failure: string | undefined;
      const handleLine = (line: string): void => {
        if (line.trim() === '') return;
        let event: { stream?: string; status?: string; error?: string; errorDetail?: { message?: string } };
        try {
          event = JSON.parse(line) as typeof event;
        } catch {
          onProgress({ message: line.trim() });
          return;
        }
        if (event.error !== undefined || event.errorDetail !== undefined) {
          failure = event.errorDetail?.message ?? event.error ?? 'build failed';
          return;
        }
        const message = (event.stream ?? event.status ?? '').trim();
        if (message !== '') onProgress({ message });
      };
      stream.on('data', (chunk: Buffer) => {
        buffered += chunk.toString('utf8');
        let newline = buffered.indexOf('\n');
        while (newline >= 0) {
          handleLine(buffered.slice(0, newline));
          buffered = buffered.slice(newline + 1);
          newline = buffered.indexOf('\n');
        }
      });
      stream.on('error', reject);
      stream.on('end', () => {
        handleLine(buffered);
        if (failure !== undefined) reject(new Error(failure));
        else resolve();
      });
    });
  }

  async removeImage(ref: string, options: { force: boolean } = { force: true }): Promise<void> {
    await removeIfPresent(() => this.docker.getImage(ref).remove({ force: options.force }));
  }
  // --- Swarm (asked of a manager) -------------------------------------------------------------

  async createConfig(name: string, data: Buffer, labels: Record<string, string>): Promise<string> {
    const created = (await this.docker.createConfig({
      Name: name,
      Labels: labels,
      Data: data.toString('base64'),
    })) as { id?: string; ID?: string };
    return createdId(created, 'config');
  }

  async removeConfig(id: string): Promise<void> {
    await removeIfPresent(() => this.docker.getConfig(id).remove());
  }

  async listConfigs(labelFilters: string[]): Promise<string[]> {
    return idsOf(await this.docker.listConfigs({ filters: { label: labelFilters } }));
  }

  async createService(spec: SwarmServiceSpec): Promise<string> {
    const created = (await this.docker.createService({
      Name: spec.name,
      Labels: spec.labels,
      TaskTemplate: {
        ContainerSpec: {
          Image: spec.image,
          Command: spec.command,
          Dir: spec.workingDir,
          User: spec.user,
          Env: spec.env,
          Labels: spec.labels,
          ReadOnly: spec.readOnly,
          Init: spec.init,
          CapabilityDrop: spec.capDrop,
          Configs: spec.configs.map((c) => ({
            ConfigID: c.configId,
            ConfigName: c.configName,
            File: { Name: c.target, UID: '0', GID: '0', Mode: c.mode },
          })),
          // SIGKILL at once when the service is removed (timeout, cancel): no grace period to abuse.
          StopSignal: 'SIGKILL',
          StopGracePeriod: 0,
          Mounts: spec.tmpfs.map((t) => ({
            Type: 'tmpfs',
            Target: t.target,
            TmpfsOptions: { SizeBytes: t.sizeBytes, Mode: t.mode },
          })),
        },
        Resources: {
          Limits: { NanoCPUs: spec.nanoCpus, MemoryBytes: spec.memoryBytes, Pids: spec.pids },
        },
        RestartPolicy: { Condition: 'none', MaxAttempts: 0 },
        ...(spec.constraints === undefined ? {} : { Placement: { Constraints: spec.constraints } }),
        // The output comes back through the service log: bounded on the node's disk.
        LogDriver: { Name: 'json-file', Options: { 'max-size': '1m', 'max-file': '1' } },
      },
      Mode: { Replicated: { Replicas: 1 } },
    } as unknown as Docker.CreateServiceOptions)) as { id?: string; ID?: string };
    return createdId(created, 'service');
  }

  async removeService(id: string): Promise<void> {
    await removeIfPresent(() => this.docker.getService(id).remove());
  }

  async listServices(labelFilters: string[]): Promise<string[]> {
    return idsOf(await this.docker.listServices({ filters: { label: labelFilters } }));
  }

  async serviceTasks(serviceId: string): Promise<SwarmTask[]> {
    const list = (await this.docker.listTasks({ filters: { service: [serviceId] } })) as Array<{
      ID: string;
      NodeID?: string;
      Status?: {
        State?: string;
        Message?: string;
        Err?: string;
        ContainerStatus?: { ContainerID?: string; ExitCode?: number };
      };
    }>;
    return list.map((t) => ({
      id: t.ID,
      state: t.Status?.State ?? 'unknown',
      exitCode: t.Status?.ContainerStatus?.ExitCode ?? null,
      containerId: t.Status?.ContainerStatus?.ContainerID,
      nodeId: t.NodeID,
      message: t.Status?.Err ?? t.Status?.Message ?? '',
    }));
  }

  async serviceLogs(serviceId: string): Promise<Buffer> {
    const logs = (await this.docker
      .getService(serviceId)
      .logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer | NodeJS.ReadableStream;
    if (Buffer.isBuffer(logs)) return logs;
    const chunks: Buffer[] = [];
    for await (const chunk of logs as AsyncIterable<Buffer>) chunks.push(chunk);
    return Buffer.concat(chunks);
  }

  async nodes(): Promise<
    Array<{ id: string; hostname: string; state: string; role: string; version: number }>
  > {
    const list = (await this.docker.listNodes()) as Array<{
      ID: string;
      Version?: { Index?: number };
      Description?: { Hostname?: string };
      Status?: { State?: string };
      Spec?: { Role?: string };
    }>;
    return list.map((n) => ({
      id: n.ID,
      hostname: n.Description?.Hostname ?? '',
      state: n.Status?.State ?? 'unknown',
      role: n.Spec?.Role ?? 'worker',
      version: n.Version?.Index ?? -1,
    }));
  }
}

/** The id a swarm create answers with (spelled `id` or `ID`, by engine version). */
function createdId(created: { id?: string; ID?: string }, what: string): string {
  const id = created.id ?? created.ID;
  if (id === undefined) throw new Error(`the engine created a ${what} without an id`);
  return id;
}

/** The ids of a swarm list answer (configs, services). */
function idsOf(list: unknown): string[] {
  return (list as Array<{ ID: string }>).map((x) => x.ID);
}
