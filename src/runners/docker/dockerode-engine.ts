import type Docker from 'dockerode';
import { realpath, stat } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import type { Duplex, Readable } from 'node:stream';
import { pinnedConnections } from './engine-pin.js';
import type { PinnedConnections } from './engine-pin.js';
import { configFingerprint } from './engine-config.js';
import { engineCall, engineJson, engineStream, engineUpgrade } from './engine-http.js';
import type { EngineEndpoint } from './engine-http.js';
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

/** Status codes the Engine API answers with, carried on its errors (ours and dockerode's). */
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

/** Where the engine answers, read from the injected environment (never process.env). */
interface Connection {
  socketPath?: string | undefined;
  host?: string | undefined;
  port?: number | undefined;
  protocol?: 'http' | 'https' | undefined;
}

/**
 * unix:// → a socket path; tcp:// / http(s):// → host and port; nothing → the local socket. Any other scheme
 * (ssh://, npipe://) is not one capsule speaks: undefined, and every request says so.
 */
function connectionOptions(socketPath: string | undefined, host: string | undefined): Connection | undefined {
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

/**
 * capsule's Docker engine client behind the DockerEngine interface. The requests of a call (ping, info, inspect,
 * create, attach, start, wait, remove, list, volumes, events) go over node:http (engine-http.ts); the rest
 * (builds, exec, archives, top, swarm) through dockerode, imported the first time one is asked for, so a
 * one-shot `capsule run` never loads it. Only this file imports dockerode, so its callback-or-promise overloads
 * and loose typings stay here. Both paths send every request through the one pinned agent.
 */
export class DockerodeEngine implements DockerEngine, SwarmApi {
  private client: Promise<Docker> | undefined;
  private readonly connection: Connection | undefined;
  private readonly endpoint: EngineEndpoint | undefined;
  private readonly remote: boolean;
  private readonly options: DockerodeEngineOptions;
  private readonly where: string;
  private readonly socketPath: string | undefined;
  private readonly connections: PinnedConnections | undefined;
  private pinned: Promise<EnginePin> | undefined;
  /** What GET /info said when the pin bound this engine to its daemon (the runner asks again right after). */
  private pinnedInfo: EngineInfo | undefined;

  constructor(options: DockerodeEngineOptions) {
    this.options = options;
    const host = options.host ?? options.env?.['DOCKER_HOST'];
    this.remote =
      options.socketPath === undefined && host !== undefined && host !== '' && !host.startsWith('unix://');
    const connection = connectionOptions(options.socketPath, host);
    this.connection = connection;
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
    this.endpoint =
      connection === undefined || this.connections === undefined
        ? undefined
        : {
            socketPath: connection.socketPath,
            hostname: connection.host,
            port: connection.port,
            tls: tls ? options.tls : undefined,
            agent: this.connections.agent,
          };
  }

  /** dockerode, loaded on first use, on the same pinned agent as every other request. */
  private docker(): Promise<Docker> {
    this.client ??= (async () => {
      const connection = this.connection;
      if (connection === undefined || this.connections === undefined) throw this.unreachable();
      const { default: Dockerode } = await import('dockerode');
      const agent = { agent: this.connections.agent };
      return new Dockerode(
        this.options.tls !== undefined
          ? { ...connection, protocol: 'https', ...this.options.tls, ...agent }
          : { ...connection, ...agent },
      );
    })();
    return this.client;
  }

  private unreachable(): Error {
    return new Error(
      `cannot reach the engine at ${this.where}: capsule speaks unix://, tcp:// and http(s):// Docker hosts`,
    );
  }

  private ep(): EngineEndpoint {
    if (this.endpoint === undefined) throw this.unreachable();
    return this.endpoint;
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
      await engineCall(this.ep(), 'GET', `/volumes/${encodeURIComponent(canary.name)}`);
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
    const text = (
      await engineCall(this.ep(), 'GET', '/events', {
        query: {
          // Seconds with a fraction: the daemon reads the digits after the point as a fraction of a second.
          since: Math.round(options.since * 1000) / 1000,
          until: Math.round(options.until * 1000) / 1000,
          filters: options.filters,
        },
      })
    ).toString('utf8');
    const found: EngineEvent[] = [];
    for (const line of text.split('\n')) {
      if (line.trim() === '') continue;
      const e = JSON.parse(line) as {
        Type?: unknown;
        Action?: unknown;
        Actor?: { ID?: unknown };
        time?: unknown;
      };
      found.push({
        type: typeof e.Type === 'string' ? e.Type : '',
        action: typeof e.Action === 'string' ? e.Action : '',
        id: typeof e.Actor?.ID === 'string' ? e.Actor.ID : '',
        time: typeof e.time === 'number' ? e.time : 0,
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
    const ep = this.ep();
    const removeCanary = (): Promise<void> =>
      removeIfPresent(() =>
        engineCall(ep, 'DELETE', `/volumes/${encodeURIComponent(canary)}`, { query: { force: true } }),
      ).catch(() => {});
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
      await engineCall(ep, 'POST', '/volumes/create', { body: { Name: canary, Labels: options.labels } });
    // From here on only the daemon that holds the canary gets a request: what is read and measured next is its.
    connections.arm(canary);
    let released = false;
    let watch: IncomingMessage | undefined;
    try {
      // The watch is open (the daemon answered it) before the identity is read: a reload after the read is seen.
      watch = await engineStream(ep, '/events', { filters: { type: ['daemon'] } });
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
      const info = await engineJson<
        Record<string, unknown> & {
          ID?: string;
          Name?: string;
          DockerRootDir?: string;
          ServerVersion?: string;
        }
      >(ep, 'GET', '/info');
      const socket = await socketNow();
      if (before !== undefined && (socket?.dev !== before.dev || socket.ino !== before.ino))
        connections.lose(`the socket ${this.socketPath ?? ''} was re-pointed while the engine was measured`);
      this.pinnedInfo = this.infoOf(info);
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
          if (connections.lost() === undefined && !options.keep) await removeCanary();
        },
      };
    } catch (err) {
      released = true;
      watch?.destroy();
      if (!options.keep) await removeCanary();
      throw err;
    }
  }

  async info(): Promise<EngineInfo> {
    // The pin's own reading of the daemon stands while the pin holds: the same daemon, no reload or restart
    // seen since (its watch loses the pin on either), so asking again would only repeat it.
    if (this.pinnedInfo !== undefined && this.connections?.lost() === undefined) return this.pinnedInfo;
    return this.infoOf(await engineJson<Record<string, unknown>>(this.ep(), 'GET', '/info'));
  }

  /** Whether the engine is reached over TCP: known from its address, without asking it. */
  reachedRemotely(): boolean {
    return this.remote;
  }

  private infoOf(info: { ServerVersion?: unknown; Runtimes?: unknown }): EngineInfo {
    return {
      serverVersion: typeof info.ServerVersion === 'string' ? info.ServerVersion : 'unknown',
      runtimes: Object.keys(typeof info.Runtimes === 'object' && info.Runtimes !== null ? info.Runtimes : {}),
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
      await Promise.race([engineCall(this.ep(), 'GET', '/_ping'), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async createContainer(spec: ContainerSpec): Promise<string> {
    const created = await engineJson<{ Id: string }>(this.ep(), 'POST', '/containers/create', {
      body: {
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
      },
    });
    return created.Id;
  }

  async attach(id: string): Promise<Duplex> {
    return engineUpgrade(this.ep(), `/containers/${encodeURIComponent(id)}/attach`, {
      stream: 1,
      stdin: 1,
      stdout: 1,
      stderr: 1,
    });
  }

  async start(id: string): Promise<void> {
    await engineCall(this.ep(), 'POST', `/containers/${encodeURIComponent(id)}/start`);
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
      const result = await Promise.race([
        engineJson<{ StatusCode?: number }>(this.ep(), 'POST', `/containers/${encodeURIComponent(id)}/wait`),
        watch,
      ]);
      return result.StatusCode ?? -1;
    } finally {
      done = true;
      clearTimeout(timer);
    }
  }

  private inspectRaw(
    id: string,
  ): Promise<{ Id: string; State: { Running: boolean; ExitCode: number; OOMKilled: boolean; Pid: number } }> {
    return engineJson(this.ep(), 'GET', `/containers/${encodeURIComponent(id)}/json`);
  }

  async inspect(id: string): Promise<ContainerState> {
    const info = await this.inspectRaw(id);
    return { running: info.State.Running, exitCode: info.State.ExitCode, oomKilled: info.State.OOMKilled };
  }

  async pidsHits(id: string): Promise<PidsHits | undefined> {
    if (this.remote) return undefined;
    const info = await this.inspectRaw(id);
    if (!info.State.Running) return undefined;
    return containerPidsHits(info.State.Pid, info.Id);
  }

  async processes(id: string): Promise<number[]> {
    const top = (await (await this.docker()).getContainer(id).top({ ps_args: '-o pid' })) as {
      Titles?: string[];
      Processes?: string[][];
    };
    const at = (top.Titles ?? []).indexOf('PID');
    if (at < 0) throw new Error('the engine listed the container processes without a PID column');
    return (top.Processes ?? []).map((row) => Number(row[at]));
  }

  async kill(id: string): Promise<void> {
    try {
      await engineCall(this.ep(), 'POST', `/containers/${encodeURIComponent(id)}/kill`, {
        query: { signal: 'SIGKILL' },
      });
    } catch (err) {
      // 409: not running any more (it exited on its own meanwhile); 404: already gone.
      const status = statusOf(err);
      if (status !== 409 && status !== 404) throw err;
    }
  }

  async remove(id: string): Promise<void> {
    try {
      await engineCall(this.ep(), 'DELETE', `/containers/${encodeURIComponent(id)}`, {
        query: { force: true, v: true },
      });
    } catch (err) {
      // 404: gone; 409: removal already in progress.
      const status = statusOf(err);
      if (status !== 404 && status !== 409) throw err;
    }
  }

  async listContainers(labelFilters: string[]): Promise<ContainerSummary[]> {
    const list = await engineJson<
      Array<{ Id: string; Labels?: Record<string, string> | null; State: string }>
    >(this.ep(), 'GET', '/containers/json', { query: { all: true, filters: { label: labelFilters } } });
    return list.map((c) => ({ id: c.Id, labels: c.Labels ?? {}, state: c.State }));
  }

  async putArchive(id: string, path: string, tar: Readable): Promise<void> {
    await (await this.docker()).getContainer(id).putArchive(tar, { path });
  }

  async exec(
    id: string,
    options: { cmd: string[]; user: string; workingDir: string; env: string[] },
  ): Promise<{ execId: string; stream: Duplex }> {
    const exec = await (await this.docker()).getContainer(id).exec({
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
    const info = await (await this.docker()).getExec(execId).inspect();
    return info.Running ? null : (info.ExitCode ?? null);
  }

  async createVolume(name: string, labels: Record<string, string>): Promise<void> {
    await engineCall(this.ep(), 'POST', '/volumes/create', { body: { Name: name, Labels: labels } });
  }

  async removeVolume(name: string): Promise<void> {
    await removeIfPresent(() =>
      engineCall(this.ep(), 'DELETE', `/volumes/${encodeURIComponent(name)}`, { query: { force: true } }),
    );
  }

  async listVolumes(labelFilters: string[]): Promise<string[]> {
    const result = await engineJson<{ Volumes?: Array<{ Name: string }> | null }>(
      this.ep(),
      'GET',
      '/volumes',
      {
        query: { filters: { label: labelFilters } },
      },
    );
    return (result.Volumes ?? []).map((v) => v.Name);
  }

  private imageRaw(ref: string): Promise<{
    Id: string;
    RepoTags?: string[] | null;
    Config?: { Labels?: Record<string, string> | null };
  }> {
    return engineJson(this.ep(), 'GET', `/images/${imagePath(ref)}/json`);
  }

  async imageInfo(
    ref: string,
  ): Promise<{ id: string; tags: string[]; labels: Record<string, string> } | undefined> {
    try {
      const info = await this.imageRaw(ref);
      const tags = (info.RepoTags ?? []).filter((t) => t !== '<none>:<none>');
      return { id: info.Id, tags, labels: info.Config?.Labels ?? {} };
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw err;
    }
  }

  async imageExists(ref: string): Promise<boolean> {
    try {
      await this.imageRaw(ref);
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
    const stream: NodeJS.ReadableStream = await (
      await this.docker()
    ).buildImage(context as NodeJS.ReadableStream, buildOptions);
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
    await removeIfPresent(() =>
      engineCall(this.ep(), 'DELETE', `/images/${imagePath(ref)}`, { query: { force: options.force } }),
    );
  }
  // --- Swarm (asked of a manager) -------------------------------------------------------------

  async createConfig(name: string, data: Buffer, labels: Record<string, string>): Promise<string> {
    const created = (await (
      await this.docker()
    ).createConfig({
      Name: name,
      Labels: labels,
      Data: data.toString('base64'),
    })) as { id?: string; ID?: string };
    return createdId(created, 'config');
  }

  async removeConfig(id: string): Promise<void> {
    await removeIfPresent(async () => (await this.docker()).getConfig(id).remove());
  }

  async listConfigs(labelFilters: string[]): Promise<string[]> {
    return idsOf(await (await this.docker()).listConfigs({ filters: { label: labelFilters } }));
  }

  async createService(spec: SwarmServiceSpec): Promise<string> {
    const created = (await (
      await this.docker()
    ).createService({
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
    await removeIfPresent(async () => (await this.docker()).getService(id).remove());
  }

  async listServices(labelFilters: string[]): Promise<string[]> {
    return idsOf(await (await this.docker()).listServices({ filters: { label: labelFilters } }));
  }

  async serviceTasks(serviceId: string): Promise<SwarmTask[]> {
    const list = (await (await this.docker()).listTasks({ filters: { service: [serviceId] } })) as Array<{
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
    const logs = (await (
      await this.docker()
    )
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
    const list = (await (await this.docker()).listNodes()) as Array<{
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

/** An image reference in a path: its slashes kept (the name's parts), every other part escaped. */
function imagePath(ref: string): string {
  return ref.split('/').map(encodeURIComponent).join('/');
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
