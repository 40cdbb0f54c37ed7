import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { CapsuleError } from '../../base/errors.js';
import { DEFAULT_WRITE_BYTES } from '../../manifest/schema.js';
import { EgressSession, type Resolver } from '../../network/egress.js';
import { NO_NETWORK_GRANT, type HttpAnswer, type HttpRequestWire } from './http-bridge.js';
import { assertGrantsUnprotected, RESERVED_NAME_PATTERN } from '../../project/protected-state.js';
import type { Capability } from '../../manifest/types.js';
import { finishedRun, type Observation, type Runner, type RunRequest, type RunResult } from '../types.js';
import { redeemPermit, type RunnerPermit } from '../permit.js';
import { WASM_PAGE_BYTES } from './binary.js';
import { ModuleCache } from './module-cache.js';
import type { Prepared } from './module-cache.js';
import { PREVIEW2_INTERFACES, type GuestPreopen, type Job } from './protocol.js';
import type { FileLogEntry } from './confined-dir.js';
import { assertDirGrants, guestPathFor } from './dir-grants.js';
import type { DirGrant } from './dir-grants.js';
import { WorkerPool } from './worker-pool.js';

export interface WasmRunnerOptions {
  /**
   * capsule's per-user cache folder (`userCacheDir(env)`); transpiled components go to its `wasm/`.
   * Never inside a project: it holds code capsule imports. None: memory only.
   */
  cacheDir?: string | undefined;
  /** Project root, so fs grants are checked against capsule's own state again before each run. */
  projectRoot?: string | undefined;
  /** capsule's per-user state folder (confirmed policies, audit heads, the key): never granted. */
  stateDir?: string | undefined;
  /** Pooled workers (default: min(2, available cores)). */
  poolSize?: number | undefined;
  /** Host environment that granted variable names are read from (default: none; openRuntime passes it). */
  hostEnv?: NodeJS.ProcessEnv | undefined;
  /** How components' granted host names are resolved. Default the system resolver (tests map names to loopback). */
  egressResolver?: Resolver | undefined;
}

/** One direct run of a Wasm binary, without a manifest (what `capsule wasm run` and the runner share). */
export interface WasmRunSpec {
  /** Path of the .wasm file (for messages and the cache key's bytes). */
  file: string;
  bytes?: Uint8Array | undefined;
  /** argv after argv[0]. */
  args: readonly string[];
  /** argv[0] the guest sees. */
  programName: string;
  env: Record<string, string>;
  /** stdin for a module; the `run(input)` argument for a component. */
  input: Uint8Array;
  dirs: readonly DirGrant[];
  timeoutMs: number;
  memoryMb: number;
  outputBytes: number;
  /** Cap on bytes written to the granted folders (limits.writeBytes; default its manifest default). */
  writeBytes?: number | undefined;
  signal?: AbortSignal | undefined;
  /** The run's network (grants.network): only components get it, through capsule's http interface. */
  egress?: EgressSession | undefined;
  /**
   * A learning run without grants.network: each request still reaches the main thread, where it is refused
   * with the same answer as always and recorded (learning never widens a run).
   */
  refusedHttp?: ((request: HttpRequestWire) => void) | undefined;
  /** A learning run: capsule's filesystem hosts record every call (WasmRawResult.files). */
  record?: boolean | undefined;
}

/** RunResult with the guest's raw bytes, for callers that must pass output through unchanged. */
export interface WasmRawResult extends Omit<RunResult, 'stdout' | 'stderr'> {
  stdout: Uint8Array;
  stderr: Uint8Array;
  /** A learning run's filesystem calls (spec.record). */
  files?: FileLogEntry[] | undefined;
}

/**
 * The Wasm runner: WASI preview1 modules (capsule's own preview1 host, preview1/host.ts) and
 * components (jco-transpiled, run against capsule's own sandboxed preview2 host). Every call gets a
 * fresh instance in a pooled worker, a hard wall-clock timeout, a memory cap written into the
 * module, output caps, and only the granted directories at `/<declared path>` — the folders
 * themselves, every path confined beneath them by ConfinedDir (no copies).
 */
export class WasmRunner implements Runner {
  readonly environment = 'wasm' as const;
  readonly #cache: ModuleCache;
  readonly #pool: WorkerPool;
  readonly #options: WasmRunnerOptions;
  #closed = false;

  constructor(options: WasmRunnerOptions = {}) {
    this.#options = options;
    this.#cache = new ModuleCache({ cacheDir: options.cacheDir });
    this.#pool = new WorkerPool({
      size: options.poolSize ?? Math.max(1, Math.min(2, os.availableParallelism())),
      workerUrl: resolveWorkerUrl,
    });
  }

  async available(): Promise<{ ok: true } | { ok: false; reason: string }> {
    if (this.#closed) return { ok: false, reason: 'the Wasm runner was closed' };
    return typeof (globalThis as { WebAssembly?: unknown }).WebAssembly === 'object'
      ? { ok: true }
      : { ok: false, reason: 'this Node has no WebAssembly' };
  }

  /** Starts the pooled workers (all, or up to `count`) now instead of on the first call. */
  async warm(count?: number): Promise<void> {
    if (this.#closed) return;
    await this.#pool.warm(count);
  }

  /**
   * Reads and compiles a staged capability's binary while its call is judged (the gate's audit append
   * waits on the disk meanwhile): compiled modules only, nothing instantiated, nothing written (see
   * ModuleCache.preload). run() reads the file again and finds the work by the bytes' hash.
   */
  async preload(capability: Capability): Promise<void> {
    if (this.#closed || capability.environment !== 'wasm') return;
    const bytes = await this.#cache.read(capability.entryPath);
    await this.#cache.preload(bytes, {
      file: capability.entryPath,
      capPages: capPages(capability.manifest.limits.memoryMb),
    });
  }

  async run(request: RunRequest, permit: RunnerPermit): Promise<RunResult> {
    redeemPermit(permit, request.capability);
    const { capability } = request;
    if (capability.environment !== 'wasm') {
      throw new CapsuleError(
        'UNSUPPORTED',
        `capability ${capability.name} is a ${capability.environment} capability, not wasm`,
        {
          file: capability.manifestPath,
          field: 'environment',
        },
      );
    }
    const { limits, grants } = capability.manifest;
    await assertGrantsUnprotected(capability.fsGrants, {
      projectRoot: this.#options.projectRoot,
      also: [this.#options.cacheDir, this.#options.stateDir],
      capabilityRoots: [capability.root],
      file: capability.manifestPath,
    });
    const hostEnv = this.#options.hostEnv ?? {};
    const env: Record<string, string> = {};
    for (const name of grants.env) {
      const v = hostEnv[name];
      if (v !== undefined) env[name] = v;
    }
    // grants.network: each request of the component is checked and audited by this run's session.
    const egress =
      grants.network.length > 0
        ? new EgressSession({ capability, resolve: this.#options.egressResolver, audit: request.egressAudit })
        : undefined;
    const observations: Observation[] = [];
    const raw = await this.runRaw({
      file: capability.entryPath,
      args: capability.manifest.args,
      programName: capability.name,
      env,
      input: Buffer.from(request.input, 'utf8'),
      dirs: capability.fsGrants.map((g) => ({
        hostPath: g.hostPath,
        guestPath: guestPathFor(g.declared),
        mode: g.mode,
      })),
      timeoutMs: limits.timeoutMs,
      memoryMb: limits.memoryMb,
      outputBytes: limits.outputBytes,
      writeBytes: limits.writeBytes,
      signal: request.signal,
      egress,
      record: request.learn === true,
      refusedHttp:
        request.learn === true && egress === undefined
          ? (wire) => observations.push(refusedObservation(wire))
          : undefined,
    }).finally(() => egress?.close());
    const { files, ...rest } = raw;
    const via = 'wasm host';
    for (const f of files ?? []) observations.unshift({ op: f.op, path: f.path, outcome: f.outcome, via });
    return {
      environment: 'wasm',
      ...finishedRun({
        ...rest,
        stdout: Buffer.from(raw.stdout).toString('utf8'),
        stderr: Buffer.from(raw.stderr).toString('utf8'),
      }),
      ...(request.learn === true
        ? {
            observed: {
              observations,
              unobserved: [
                "files outside the granted folders: a guest resolves its paths against its preopens itself, so a name under no granted folder never reaches capsule's host (what it tried inside or above one is recorded)",
                'environment variables read',
              ],
            },
          }
        : {}),
    };
  }

  /** Runs a .wasm file directly. Throws a CapsuleError only when it cannot start. */
  async runRaw(spec: WasmRunSpec): Promise<WasmRawResult> {
    if (this.#closed) throw new CapsuleError('RUNNER_UNAVAILABLE', 'the Wasm runner was closed');
    const started = performance.now();
    const bytes = spec.bytes ?? (await this.#cache.read(spec.file));
    const prepared = await this.#cache.prepare(bytes, { file: spec.file, capPages: capPages(spec.memoryMb) });
    if (prepared.kind === 'module' && prepared.foreignImports.length > 0) {
      throw new CapsuleError(
        'UNSUPPORTED',
        `${spec.file} cannot start: it imports ${prepared.foreignImports.join(', ')}, which the Wasm sandbox does not provide`,
        {
          file: spec.file,
          hint: 'A WASI preview1 command may import only wasi_snapshot_preview1 functions.',
        },
      );
    }
    if (prepared.kind === 'module' && spec.egress !== undefined) {
      // Preview1 has no HTTP to implement and capsule gives it no sockets: refuse instead of running without.
      throw new CapsuleError(
        'UNSUPPORTED',
        `${spec.file} is a WASI preview1 module, which gets no network; grants.network needs a component`,
        {
          field: 'grants.network',
          hint: 'Build the capability as a component (a JavaScript source: capsule:capability/http), or remove grants.network.',
        },
      );
    }
    if (prepared.kind === 'component') {
      const missing = prepared.imports.filter((i) => !PREVIEW2_INTERFACES.includes(i));
      if (missing.length > 0) {
        throw new CapsuleError(
          'UNSUPPORTED',
          `${spec.file} imports ${missing.join(', ')}, which the Wasm sandbox does not provide`,
          {
            file: spec.file,
            hint: 'Components may use wasi:cli, clocks, random, io, filesystem and (denied) sockets; build without the other interfaces.',
          },
        );
      }
    }
    await assertDirGrants(spec.dirs);
    const preopens: GuestPreopen[] = spec.dirs.map((d) => ({
      guest: d.guestPath,
      host: d.hostPath,
      readOnly: d.mode === 'ro',
    }));
    const job = toJob(prepared, spec, preopens);
    const egress = spec.egress;
    const outcome = await this.#pool.run(job, {
      timeoutMs: spec.timeoutMs,
      signal: spec.signal,
      onHttp:
        egress !== undefined
          ? (request) => httpThroughEgress(egress, request)
          : spec.refusedHttp !== undefined
            ? refusedHttp(spec.refusedHttp)
            : undefined,
    });
    const base: WasmRawResult = {
      environment: 'wasm',
      ...finishedRun({ timedOut: outcome.timedOut, canceled: outcome.canceled }),
      stdout: new Uint8Array(0),
      stderr: new Uint8Array(0),
    };
    if (outcome.startError !== undefined) {
      if (outcome.startError instanceof CapsuleError) throw outcome.startError;
      throw new CapsuleError(
        'RUNNER_UNAVAILABLE',
        `cannot start a Wasm worker: ${String(outcome.startError)}`,
        {
          hint: 'Reinstall or rebuild capsule (npm run build).',
        },
      );
    }
    const { reply } = outcome;
    if (reply?.type === 'failed') {
      throw new CapsuleError('RUNNER_FAILED', `${spec.file} cannot start: ${reply.message}`, {
        file: spec.file,
        hint: 'A WASI preview1 command needs only wasi_snapshot_preview1 imports and a _start export.',
      });
    }
    if (reply !== undefined) {
      base.exitCode = reply.exitCode;
      base.stdout = reply.stdout;
      base.stderr = reply.stderr;
      base.truncated = reply.truncated;
      base.oomKilled = reply.oomKilled;
      if (reply.writeLimited) base.writeLimited = true;
      if (reply.files !== undefined) base.files = reply.files;
    } else if (outcome.crash !== undefined) {
      base.stderr = Buffer.from(`capsule: the Wasm worker died: ${outcome.crash}\n`);
      base.oomKilled = /memory/i.test(outcome.crash);
    } else if (outcome.timedOut) {
      base.stderr = Buffer.from(`capsule: killed after the ${spec.timeoutMs} ms time limit\n`);
    }
    base.durationMs = performance.now() - started;
    return base;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#pool.close();
  }
}

function capPages(memoryMb: number): number {
  return Math.floor((memoryMb * 1024 * 1024) / WASM_PAGE_BYTES);
}

function toJob(prepared: Prepared, spec: WasmRunSpec, preopens: GuestPreopen[]): Job {
  const args = [spec.programName, ...spec.args];
  if (prepared.kind === 'module') {
    return {
      kind: 'module',
      key: prepared.key,
      code: { module: prepared.module, memory: prepared.memory },
      args,
      env: spec.env,
      stdin: spec.input,
      preopens,
      hiddenNames: RESERVED_NAME_PATTERN,
      outputBytes: spec.outputBytes,
      writeBytes: spec.writeBytes ?? DEFAULT_WRITE_BYTES,
      maxPages: prepared.maxPages,
      record: spec.record,
    };
  }
  return {
    kind: 'component',
    key: prepared.key,
    code: { jsUrl: prepared.jsUrl, modules: prepared.modules, memories: prepared.memories },
    input: Buffer.from(spec.input).toString('utf8'),
    args,
    env: spec.env,
    preopens,
    network: spec.egress !== undefined || spec.refusedHttp !== undefined,
    hiddenNames: RESERVED_NAME_PATTERN,
    outputBytes: spec.outputBytes,
    writeBytes: spec.writeBytes ?? DEFAULT_WRITE_BYTES,
    maxPages: prepared.maxPages,
    record: spec.record,
  };
}

/** The answer a component without grants.network always gets, after `record` saw the request. */
function refusedHttp(
  record: (request: HttpRequestWire) => void,
): (request: HttpRequestWire) => Promise<HttpAnswer> {
  return (request) => {
    record(request);
    return Promise.resolve({ ok: false, error: NO_NETWORK_GRANT });
  };
}

/** A refused request as a learning run records it: host, port and method, as the URL names them. */
function refusedObservation(request: HttpRequestWire): Observation {
  let host: string | undefined;
  let port: number | undefined;
  try {
    const url = new URL(request.url);
    host = url.hostname;
    port = url.port !== '' ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
  } catch {
    // Not a URL: recorded without a host (nothing to propose).
  }
  return {
    op: 'http',
    host,
    port,
    method: request.method.toUpperCase(),
    outcome: 'refused',
    via: 'wasm http bridge',
  };
}

/** A component's request, made by capsule (src/network/fetch.ts) under the run's egress session. */
async function httpThroughEgress(egress: EgressSession, request: HttpRequestWire): Promise<HttpAnswer> {
  const { egressFetch } = await import('../../network/fetch.js');
  try {
    const res = await egressFetch(egress, request);
    return { ok: true, status: res.status, headers: res.headers, body: res.body };
  } catch (err) {
    return { ok: false, error: (err as Error).message };
  }
}

/**
 * The worker runs as plain JavaScript: from dist it is the compiled worker.js beside this file;
 * from src (vitest) worker.ts and the sibling modules it imports (which, like it, import only
 * `node:` builtins) are transpiled on the fly into data: URLs, each relative import rewritten to
 * the data: URL of its module.
 */
async function resolveWorkerUrl(): Promise<URL> {
  const compiled = new URL('./worker.js', import.meta.url);
  if (existsSync(fileURLToPath(compiled))) return compiled;
  const source = new URL('./worker.ts', import.meta.url);
  if (!existsSync(fileURLToPath(source))) {
    throw new CapsuleError(
      'RUNNER_UNAVAILABLE',
      `the Wasm worker script is missing next to ${fileURLToPath(import.meta.url)}`,
      {
        hint: 'Rebuild capsule (npm run build).',
      },
    );
  }
  const ts = await import('typescript');
  const done = new Map<string, string>();
  const toDataUrl = async (file: URL): Promise<string> => {
    const known = done.get(file.href);
    if (known !== undefined) return known;
    const out = ts.transpileModule(await readFile(fileURLToPath(file), 'utf8'), {
      compilerOptions: {
        module: ts.ModuleKind.ESNext,
        target: ts.ScriptTarget.ES2022,
        verbatimModuleSyntax: false,
      },
    });
    let js = out.outputText;
    for (const m of [...js.matchAll(/from '(\.\.?\/[^']+)\.js'/g)]) {
      const spec = m[1] as string;
      js = js.replaceAll(`from '${spec}.js'`, `from '${await toDataUrl(new URL(`${spec}.ts`, file))}'`);
    }
    const url = `data:text/javascript;base64,${Buffer.from(js).toString('base64')}`;
    done.set(file.href, url);
    return url;
  };
  return new URL(await toDataUrl(source));
}
