import path from 'node:path';
import type { Duplex, Readable } from 'node:stream';
import { packageRoot } from '../../base/package-root.js';
import type { PidsHits } from './pids-events.js';

export type { PidsHits };

/**
 * The small slice of the Docker Engine API capsule uses, in our own types. The dockerode
 * implementation lives beside it (dockerode-engine.ts); tests and a future remote/mock engine
 * implement this interface instead of dockerode's callback-or-promise surface.
 */

export interface Mount {
  /** Host path (bind) or volume name (volume). */
  source: string;
  /** Absolute path inside the container. */
  target: string;
  type: 'bind' | 'volume';
  readOnly: boolean;
}

/** Everything needed to create one container; mapped 1:1 onto the Engine API by the implementation. */
export interface ContainerSpec {
  image: string;
  /** Replaces the image's entrypoint when set. */
  entrypoint?: string[] | undefined;
  cmd: string[];
  workingDir: string;
  user: string;
  env: string[];
  labels: Record<string, string>;
  openStdin: boolean;
  runtime: string;
  networkDisabled: boolean;
  networkMode: 'none' | 'host';
  pidMode: '' | 'host';
  ipcMode: 'private' | 'host';
  privileged: boolean;
  readonlyRootfs: boolean;
  capDrop: string[];
  capAdd: string[];
  securityOpt: string[];
  memoryBytes: number;
  memorySwapBytes: number;
  pidsLimit: number;
  nanoCpus: number;
  ulimits: Array<{ name: string; soft: number; hard: number }>;
  tmpfs: Record<string, string>;
  mounts: Mount[];
  /** Namespaced kernel parameters of the container (IPC ones only: the container has its own IPC namespace). */
  sysctls?: Record<string, string> | undefined;
  /** Logging driver; `none` keeps an output flood from being written to the engine's disk. */
  logDriver: string;
}

export interface ContainerState {
  running: boolean;
  exitCode: number;
  oomKilled: boolean;
}

export interface ContainerSummary {
  id: string;
  labels: Record<string, string>;
  state: string;
}

export interface EngineInfo {
  serverVersion: string;
  runtimes: string[];
  /** True when the engine is reached over TCP/SSH (DOCKER_HOST), so host paths cannot be bind-mounted. */
  remote: boolean;
}

/**
 * Who answered when an engine was measured: what a posture measurement is bound to (engine-pin.ts,
 * docs/scale-out.md#posture-is-bound-to-the-daemon).
 */
export interface EngineIdentity {
  /** GET /info `ID` (before Docker 23 the host's trust key: every dockerd of one host shares it). */
  id: string;
  /** GET /info `Name` (the daemon's host name). */
  name: string;
  /** GET /info `DockerRootDir`. */
  rootDir: string;
  serverVersion: string;
  /** Where it was reached (unix:///path, tcp://host:port). */
  host: string;
  /** For a unix socket: the socket the path led to (its real path and inode) when it was measured. */
  socket?: { path: string; realPath: string; dev: number; ino: number } | undefined;
  /** The volume only the measured daemon has: every connection must show it before it carries a request. */
  canary: string;
  /**
   * sha256 of what GET /info says of the daemon's configuration (runtimes and their paths, the default runtime,
   * security options, init, cgroup and storage drivers, kernel, live-restore, labels): a daemon reloaded or
   * restarted with another configuration it reports shows another value.
   */
  config?: string | undefined;
}

/** One entry of a daemon's own event log (it keeps its last 256 in memory; none survive a restart). */
export interface EngineEvent {
  type: string;
  action: string;
  /** The object's id (a container's, a volume's name; empty for the daemon's own events). */
  id: string;
  /** When the daemon logged it (seconds since the epoch, its own clock; 0 when it did not say). */
  time?: number | undefined;
}

/** An engine bound to the daemon it measured; once lost it sends nothing more (a new connection measures again). */
export interface EnginePin {
  readonly identity: EngineIdentity;
  /**
   * Why this pin no longer holds, or undefined: checked before each call (in memory, plus a stat of a unix
   * socket path: re-pointed to another socket is lost too).
   */
  check(): Promise<string | undefined>;
  /** Give it up (a health check failed): nothing more is sent on it. */
  lose(why: string): void;
  /** Stop watching the daemon and remove the canary. */
  release(): Promise<void>;
}

export interface BuildProgress {
  /** One line of build output (a step, a layer), already trimmed. */
  message: string;
}

/** The operations capsule needs. Every method returns a promise; failures reject with an Error. */
export interface DockerEngine {
  info(): Promise<EngineInfo>;
  /**
   * EngineInfo.remote without a request (it follows from the address): a call whose runtime is runc then needs
   * no GET /info at all.
   */
  reachedRemotely?(): boolean;
  ping(timeoutMs: number): Promise<void>;
  /**
   * Bind this engine to the daemon that answers now (once): the canary volume is made there and from then on
   * every connection is checked for it, the daemon's events are watched (a restart or reload loses the pin)
   * and its identity is read. An engine without it cannot be bound, so its posture is never trusted.
   */
  pin?(canary: {
    name: string;
    labels: Record<string, string>;
    /** Kept on the daemon on release (a stored measurement names it; see resumePin). */
    keep?: boolean | undefined;
  }): Promise<EnginePin>;
  /**
   * Like pin(), with a canary a measurement stored earlier made (it is not created): resolves undefined, with
   * nothing armed, when the daemon answering now does not have it. The canary is kept on release.
   */
  resumePin?(canary: { name: string }): Promise<EnginePin | undefined>;
  /** Where this engine is reached (unix:///path, tcp://host:port): what a stored measurement is filed under. */
  readonly address?: string | undefined;
  /** The daemon's own event log between two times (seconds since the epoch), filtered as the Engine API filters. */
  events?(options: {
    since: number;
    until: number;
    filters: Record<string, string[]>;
  }): Promise<EngineEvent[]>;
  /** A new, unpinned engine object for the same address (its own connections), to measure it again. */
  another?(): DockerEngine;
  /** Close the connections this engine object keeps open (it may still open new ones). */
  disconnect?(): void;

  createContainer(spec: ContainerSpec): Promise<string>;
  /** Attach stdin/stdout/stderr before start so no output is lost. The stream carries multiplexed frames. */
  attach(id: string): Promise<Duplex>;
  start(id: string): Promise<void>;
  /** Resolves with the exit code once the container is not running. */
  wait(id: string): Promise<number>;
  inspect(id: string): Promise<ContainerState>;
  /**
   * The kernel's counter of forks the container's pids limit refused, read from this host's cgroups while
   * the container runs. Undefined when the engine's containers are not on this host (a remote engine, or
   * one whose processes this host cannot see): nothing is then claimed about the pids limit.
   */
  pidsHits?(id: string): Promise<PidsHits | undefined>;
  /**
   * Host pids of every process in the container (zombies included), as the engine sees them from outside:
   * nothing inside the container can change this answer.
   */
  processes(id: string): Promise<number[]>;
  kill(id: string): Promise<void>;
  remove(id: string): Promise<void>;
  listContainers(labelFilters: string[]): Promise<ContainerSummary[]>;
  /** Upload a tar archive and extract it at `path` inside a (created, not necessarily started) container. */
  putArchive(id: string, path: string, tar: Readable): Promise<void>;

  /** Run a command in a running container with stdin attached; returns the exec id and its stream. */
  exec(
    id: string,
    options: { cmd: string[]; user: string; workingDir: string; env: string[] },
  ): Promise<{ execId: string; stream: Duplex }>;
  /** Exit code of a finished exec (null while running). */
  execExitCode(execId: string): Promise<number | null>;

  createVolume(name: string, labels: Record<string, string>): Promise<void>;
  removeVolume(name: string): Promise<void>;
  listVolumes(labelFilters: string[]): Promise<string[]>;

  imageExists(ref: string): Promise<boolean>;
  /** The image's id, tags and labels, or undefined when the engine does not have it. */
  imageInfo(ref: string): Promise<{ id: string; tags: string[]; labels: Record<string, string> } | undefined>;
  /** Build an image from a tar build context (Dockerfile at its root), reporting progress lines. */
  buildImage(
    context: Readable,
    options: { tag: string; labels: Record<string, string> },
    onProgress: (p: BuildProgress) => void,
  ): Promise<void>;
  /** Remove an image; without force the engine refuses (rejects) while a container uses it. */
  removeImage(ref: string, options?: { force: boolean }): Promise<void>;
}

/** The engine's own message ("No such image", "executable file not found") instead of dockerode's wrapper text. */
export function engineMessage(err: unknown): string {
  const json = (err as { json?: { message?: unknown } } | null)?.json;
  if (json !== undefined && json !== null && typeof json.message === 'string') return json.message;
  return err instanceof Error ? err.message : String(err);
}

/** Whether an engine error means that nothing listens at the address: no engine there at all. */
export function isNoEngine(err: unknown): boolean {
  return /ENOENT|ECONNREFUSED/.test(engineMessage(err));
}

/** How to get an engine that answers: capsule's own provisioning script, by its absolute path (it works pasted). */
export function engineRemedy(): string {
  const script = path.join(packageRoot(), 'scripts', 'provision-docker.sh');
  return `start one with "sudo bash ${script}" (installs docker.io and starts dockerd), or set DOCKER_HOST to an engine that runs`;
}

/** The one line every docker command gives when no engine answers at `where`: what is missing, and how to get it. */
export function noEngineLine(where: string): string {
  return `no Docker engine answers at ${where}: ${engineRemedy()}`;
}

/** One file a Swarm service gets from a config object (mounted read-only at `target`). */
export interface SwarmConfigFile {
  configId: string;
  configName: string;
  target: string;
  mode: number;
}

/** A one-shot service: what the Swarm runner asks a manager for (mapped onto the Engine API's ServiceSpec). */
export interface SwarmServiceSpec {
  name: string;
  labels: Record<string, string>;
  image: string;
  command: string[];
  workingDir: string;
  user: string;
  env: string[];
  readOnly: boolean;
  init: boolean;
  capDrop: string[];
  configs: SwarmConfigFile[];
  tmpfs: Array<{ target: string; sizeBytes: number; mode: number }>;
  nanoCpus: number;
  memoryBytes: number;
  pids: number;
  /** Placement constraints (`node.id==…`): the posture probe runs once on each node. */
  constraints?: string[] | undefined;
}

export interface SwarmTask {
  id: string;
  /** new … running, complete, failed, shutdown, rejected, orphaned, remove. */
  state: string;
  exitCode: number | null;
  containerId: string | undefined;
  nodeId: string | undefined;
  message: string;
}

/** The Swarm part of the Engine API, asked of a manager. */
export interface SwarmApi {
  createConfig(name: string, data: Buffer, labels: Record<string, string>): Promise<string>;
  removeConfig(id: string): Promise<void>;
  listConfigs(labelFilters: string[]): Promise<string[]>;
  createService(spec: SwarmServiceSpec): Promise<string>;
  removeService(id: string): Promise<void>;
  listServices(labelFilters: string[]): Promise<string[]>;
  serviceTasks(serviceId: string): Promise<SwarmTask[]>;
  /** The service's log as multiplexed frames (stdout 1, stderr 2), up to the end of its task. */
  serviceLogs(serviceId: string): Promise<Buffer>;
  /** `version`: the node object's version index, raised by every change of it (a node that left and came back). */
  nodes(): Promise<Array<{ id: string; hostname: string; state: string; role: string; version: number }>>;
}
