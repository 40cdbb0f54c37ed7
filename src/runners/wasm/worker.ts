/**
 * Pooled worker of the WasmRunner: instantiates a fresh instance per job and runs it.
 * It imports only `node:` builtins and sibling modules that do the same (the preview1 host,
 * confined-dir, the preview2 host): from dist it is loaded as worker.js, under vitest as data: URLs
 * (see resolveWorkerUrl). The main thread enforces wall time by terminating this worker.
 */
import { receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import { setFlagsFromString } from 'node:v8';
import { HOST_MEMORY_IMPORT } from './protocol.js';
import type {
  ComponentJob,
  HostMemory,
  Job,
  JobReply,
  JobRequest,
  ModuleJob,
  WorkerChannel,
} from './protocol.js';
import { Preview1Exit } from './preview1/call.js';
import { createPreview1, preview1Imports } from './preview1/host.js';
import { FileLog, WriteBudget } from './confined-dir.js';
import type { Preview1Host } from './preview1/host.js';
import type { WasmImports, WasmInstance, WasmMemory, WasmModule, WebAssemblyApi } from './wasm-types.js';
import { preview2Imports, type Preview2Host } from './preview2-host.js';
import { blockingHttp, type HttpCall } from './http-bridge.js';

const WA = (globalThis as unknown as { WebAssembly: WebAssemblyApi }).WebAssembly;

// QuickJS components use extended-const, which Node 20's V8 has behind a flag.
setFlagsFromString('--experimental-wasm-extended-const');

// The transpiled glue probes `WebAssembly.promising` (JSPI) four times per instantiate, as
// `try { xAsync = WebAssembly.promising(f); } catch (e) { xAsync = f; }`. Node 20 has no JSPI, so
// each probe called undefined, and V8 builds that TypeError's message ("… is not a function") by
// re-parsing the calling function: the glue's 7000-line instantiate body, ~2.5 ms per probe, ~10
// ms of a 12 ms call. Here `promising` throws one prebuilt error instead (the same fallback, no
// re-parse), and while a glue whose every use of it is such a probe instantiates, it returns `f`
// itself: exactly what the fallback assigns, without the cost of a throw. Any other use (async
// exports) still gets the throw, as it would from Node.
const jspi = WA as unknown as { promising?: unknown };
const NO_JSPI = Object.freeze(new TypeError('WebAssembly.promising (JSPI) is not available on this Node'));
const hasJspi = typeof jspi.promising === 'function';
const jspiMissing = (): never => {
  throw NO_JSPI;
};
const probeFallback = <F>(f: F): F => f;
if (!hasJspi) {
  Object.defineProperty(WA, 'promising', { value: jspiMissing, configurable: true, writable: true });
}
const PROBE =
  /try \{\s*([\w$]+) = WebAssembly\.promising\(([\w$.]+)\);\s*\} catch\s*\(\w+\)\s*\{\s*\1 = \2;\s*\}/g;

/** True when every use of `promising` in the glue (comment lines aside) is a probe with a plain fallback. */
function onlyJspiProbes(jsUrl: string): boolean {
  if (hasJspi) return false;
  const text = Buffer.from(jsUrl.slice(jsUrl.indexOf(',') + 1), 'base64')
    .toString('utf8')
    .replace(/^\s*\/\/.*$/gm, '');
  const uses = text.match(/\bpromising\b/g)?.length ?? 0;
  return uses === (text.match(PROBE)?.length ?? 0);
}

const TRAP = 134;
const PAGE = 65_536;
class OutputLimit extends Error {}
class GuestExit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

/** Collects one stream up to the cap; past it the guest is stopped by an OutputLimit throw. */
class Sink {
  readonly chunks: Uint8Array[] = [];
  size = 0;
  constructor(readonly cap: number) {}

  write(data: Uint8Array): void {
    const room = this.cap - this.size;
    if (data.length > room) {
      if (room > 0) this.chunks.push(data.slice(0, room));
      this.size = this.cap;
      throw new OutputLimit('output limit');
    }
    this.chunks.push(data.slice());
    this.size += data.length;
  }

  /** The bytes in a buffer of their own (never a slice of Node's shared pool), so a reply can transfer it. */
  bytes(): Uint8Array {
    const out = new Uint8Array(this.size);
    let at = 0;
    for (const c of this.chunks) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  }
}

/** The output buffers a reply hands over instead of copying (each is the reply's own, see Sink.bytes). */
function transferOf(reply: JobReply): ArrayBuffer[] {
  if (reply.type !== 'done') return [];
  const buffers = [reply.stdout.buffer, reply.stderr.buffer];
  return buffers.filter((b, i): b is ArrayBuffer => b instanceof ArrayBuffer && buffers.indexOf(b) === i);
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function looksLikeOom(memories: WasmMemory[], maxPages: number, stderr: string): boolean {
  const atCap = memories.some((m) => m.buffer.byteLength / PAGE >= maxPages - 16);
  return atCap || /out of memory|memory allocation|allocation failed/i.test(stderr);
}

/** The reply for a guest that ran to its end (exit, trap or output cap); a failure near the memory cap is OOM. */
function doneReply(
  id: number,
  ran: { exitCode: number; trapped: boolean; truncated: boolean; stdout: Sink; stderr: Sink },
  memories: WasmMemory[],
  maxPages: number,
  writes: WriteBudget,
  log?: FileLog | undefined,
): JobReply {
  const errBytes = ran.stderr.bytes();
  const oomKilled =
    (ran.trapped || ran.exitCode !== 0) &&
    memories.length > 0 &&
    looksLikeOom(memories, maxPages, Buffer.from(errBytes).toString('utf8'));
  return {
    type: 'done',
    id,
    exitCode: ran.truncated ? 1 : ran.exitCode,
    stdout: ran.stdout.bytes(),
    stderr: errBytes,
    truncated: ran.truncated,
    oomKilled,
    writeLimited: writes.exceeded,
    ...(log !== undefined ? { files: log.entries } : {}),
  };
}

/**
 * The memory of one rewritten module (see memoryFromHost in binary.ts), kept between its calls:
 * reusing it saves mapping and faulting in fresh pages on every call. A new instance gets it zeroed,
 * which is what a new memory is, so the instance cannot tell the two apart. Once a call is over its
 * memory is wiped before this worker takes another job (serve wipes it right after posting the reply,
 * off the call's path; take() wipes one not yet wiped): no call's data reaches another. Where an
 * earlier call's code may still write to it between calls (a component's glue may hold callbacks for
 * it), take() zeroes it again. A worker runs one call at a time, synchronously: nothing else runs
 * while a call holds the memory. Only a memory still at its initial size is kept (memories never
 * shrink; a fresh instance starts at the initial size).
 */
class MemorySlot {
  #spare: WasmMemory | undefined;
  /** The spare still holds the last call's data. */
  #dirty = false;
  constructor(
    readonly limits: HostMemory,
    /** Zero the spare again on take: code of an earlier call may have written to it since. */
    readonly zeroOnTake: boolean,
    /** Where a slot whose spare awaits its wipe is put (see wipeSpares). */
    readonly toWipe: Set<MemorySlot>,
  ) {}

  take(): WasmMemory {
    const spare = this.#spare;
    this.#spare = undefined;
    if (spare === undefined) return new WA.Memory(this.limits);
    if (this.#dirty || this.zeroOnTake) new Uint8Array(spare.buffer).fill(0);
    this.#dirty = false;
    this.toWipe.delete(this);
    return spare;
  }

  give(memory: WasmMemory): void {
    if (memory.buffer.byteLength !== this.limits.initial * PAGE) return;
    this.#spare = memory;
    this.#dirty = true;
    this.toWipe.add(this);
  }

  wipe(): void {
    if (this.#spare !== undefined && this.#dirty) new Uint8Array(this.#spare.buffer).fill(0);
    this.#dirty = false;
  }
}

/** Slots whose spare memory still holds its last call's data. */
const unwiped = new Set<MemorySlot>();

/** Zeroes every memory a call left behind (between jobs, after the reply is on its way). */
function wipeSpares(): void {
  for (const slot of unwiped) slot.wipe();
  unwiped.clear();
}

/** Imports for a module whose memory its slot supplies. */
function withMemory(imports: WasmImports, memory: WasmMemory): WasmImports {
  return { ...imports, [HOST_MEMORY_IMPORT.module]: { [HOST_MEMORY_IMPORT.name]: memory } };
}

const patterns = new Map<string, RegExp>();
function hiddenBy(source: string | undefined): ((name: string) => boolean) | undefined {
  if (source === undefined) return undefined;
  let re = patterns.get(source);
  if (re === undefined) patterns.set(source, (re = new RegExp(source, 'iu')));
  return (name) => re.test(name);
}

interface LoadedModule {
  module: WasmModule;
  slot: MemorySlot | undefined;
  /** The preview1 functions it imports: the host wraps only these for a call. */
  names: string[];
}

function runModule(id: number, job: ModuleJob, code: LoadedModule): JobReply {
  const stdout = new Sink(job.outputBytes);
  const stderr = new Sink(job.outputBytes);
  let memory: WasmMemory | undefined;
  let host: Preview1Host;
  const supplied = code.slot?.take();
  const writes = new WriteBudget(job.writeBytes);
  const log = job.record === true ? new FileLog() : undefined;
  try {
    host = createPreview1({
      args: job.args,
      env: job.env,
      stdin: job.stdin,
      stdout,
      stderr,
      preopens: job.preopens,
      memory: () => memory,
      hidden: hiddenBy(job.hiddenNames),
      writes,
      log,
      names: code.names,
    });
  } catch (err) {
    return { type: 'failed', id, message: `a granted directory cannot be opened: ${describe(err)}` };
  }
  let exitCode = 0;
  let truncated = false;
  let trapped = false;
  const stopped = (err: unknown): void => {
    if (err instanceof Preview1Exit) exitCode = err.code;
    else if (err instanceof OutputLimit) truncated = true;
    else {
      trapped = true;
      exitCode = TRAP;
      try {
        stderr.write(Buffer.from(`\nwasm trap: ${describe(err)}\n`));
      } catch {
        truncated = true;
      }
    }
  };
  try {
    let instance: WasmInstance | undefined;
    try {
      const imports = { wasi_snapshot_preview1: host.imports } as WasmImports;
      instance = new WA.Instance(
        code.module,
        supplied === undefined ? imports : withMemory(imports, supplied),
      );
    } catch (err) {
      // A link/type error means it cannot start; a trap (or exit) in the start function is the guest's own.
      if (
        !(err instanceof WA.RuntimeError) &&
        !(err instanceof OutputLimit) &&
        !(err instanceof Preview1Exit)
      ) {
        return { type: 'failed', id, message: describe(err) };
      }
      stopped(err);
    }
    if (instance !== undefined) {
      const mem = instance.exports.memory;
      if (mem instanceof WA.Memory) memory = mem;
      const start = instance.exports._start;
      if (typeof start !== 'function') {
        return { type: 'failed', id, message: 'the module has no _start export (not a WASI command)' };
      }
      try {
        (start as () => void)();
      } catch (err) {
        stopped(err);
      }
    }
  } finally {
    host.close();
    if (supplied !== undefined) code.slot?.give(supplied);
  }
  return doneReply(
    id,
    { exitCode, trapped, truncated, stdout, stderr },
    memory === undefined ? [] : [memory],
    job.maxPages,
    writes,
    log,
  );
}

// ---------------------------------------------------------------- components (see preview2-host.ts)

interface TranspiledComponent {
  instantiate(
    getCoreModule: (name: string) => WasmModule,
    imports: Record<string, Record<string, unknown>>,
    instantiateCore?: (module: WasmModule, imports: WasmImports) => WasmInstance,
  ): Record<string, unknown>;
}

interface LoadedComponent {
  glue: TranspiledComponent;
  modules: Record<string, WasmModule>;
  /** The slot of each module whose memory this worker supplies. */
  slots: Map<WasmModule, MemorySlot>;
  /** See onlyJspiProbes. */
  probesOnly: boolean;
}

/** Posts a message to the main thread (an HTTP call of the running job), transferring `transfer`. */
type PostToMain = (call: HttpCall, transfer: MessagePort[]) => void;

function runComponent(
  id: number,
  job: ComponentJob,
  code: LoadedComponent,
  toMain: PostToMain | undefined,
): JobReply {
  const stdout = new Sink(job.outputBytes);
  const stderr = new Sink(job.outputBytes);
  const memories: WasmMemory[] = [];
  const writes = new WriteBudget(job.writeBytes);
  const log = job.record === true ? new FileLog() : undefined;
  const host = preview2Imports(job, {
    stdout,
    stderr,
    hidden: hiddenBy(job.hiddenNames),
    writes,
    log,
    exit: (status) => {
      throw new GuestExit(status);
    },
    http: job.network && toMain !== undefined ? (request) => blockingHttp(toMain, id, request) : undefined,
  });
  // Memories this call's instances got from their slots, handed back once the call is over.
  const supplied: Array<[MemorySlot, WasmMemory]> = [];
  try {
    return callComponent(id, job, code, host, { stdout, stderr, memories, writes, log }, supplied);
  } finally {
    host.dispose();
    for (const [slot, memory] of supplied) slot.give(memory);
  }
}

function callComponent(
  id: number,
  job: ComponentJob,
  code: LoadedComponent,
  host: Preview2Host,
  io: { stdout: Sink; stderr: Sink; memories: WasmMemory[]; writes: WriteBudget; log: FileLog | undefined },
  supplied: Array<[MemorySlot, WasmMemory]>,
): JobReply {
  const { stdout, stderr, memories, writes, log } = io;
  let exports: Record<string, unknown>;
  let exitCode = 0;
  let truncated = false;
  let trapped = false;
  if (code.probesOnly) jspi.promising = probeFallback;
  try {
    exports = code.glue.instantiate(
      (name) => {
        const m = code.modules[name];
        if (m === undefined)
          throw new WA.LinkError(`core module ${name} missing from the transpiled component`);
        return m;
      },
      host.imports,
      (module, imports) => {
        const slot = code.slots.get(module);
        let linked = imports;
        if (slot !== undefined) {
          const memory = slot.take();
          supplied.push([slot, memory]);
          linked = withMemory(imports, memory);
        }
        const instance = new WA.Instance(module, linked);
        for (const v of Object.values(instance.exports)) if (v instanceof WA.Memory) memories.push(v);
        return instance;
      },
    );
  } catch (err) {
    return {
      type: 'failed',
      id,
      message: `instantiation failed (a missing or mismatched import fails closed): ${describe(err)}`,
    };
  } finally {
    if (code.probesOnly) jspi.promising = jspiMissing;
  }
  const run = exports.run;
  if (typeof run !== 'function') {
    return { type: 'failed', id, message: 'the component does not export run(input: string) -> string' };
  }
  try {
    const out: unknown = run(job.input);
    if (typeof out === 'string') stdout.write(Buffer.from(out, 'utf8'));
  } catch (err) {
    if (err instanceof OutputLimit) truncated = true;
    else if (err instanceof GuestExit) exitCode = err.code;
    else {
      trapped = err instanceof WA.RuntimeError;
      exitCode = trapped ? TRAP : 1;
      try {
        stderr.write(Buffer.from(`\n${trapped ? 'wasm trap' : 'component error'}: ${describe(err)}\n`));
      } catch {
        truncated = true;
      }
    }
  }
  return doneReply(id, { exitCode, trapped, truncated, stdout, stderr }, memories, job.maxPages, writes, log);
}

/**
 * Compiled code this worker holds, by job key, least recently used first. Only code lives here:
 * every call still builds its own instances, host objects and output sinks (memories: see MemorySlot).
 */
const codes = new Map<string, LoadedModule | LoadedComponent>();
const MAX_CODES = 32;

function remember(key: string, code: LoadedModule | LoadedComponent): void {
  codes.delete(key);
  codes.set(key, code);
  while (codes.size > MAX_CODES) {
    const oldest = codes.keys().next().value;
    if (oldest === undefined) break;
    codes.delete(oldest);
  }
}

/**
 * Runs one job in this thread and answers (exported so the bench can measure the in-process floor).
 * `toMain` carries a component's HTTP calls to the main thread; without it every request is refused.
 */
export async function executeJob(id: number, job: Job, toMain?: PostToMain): Promise<JobReply> {
  try {
    const known = codes.get(job.key);
    if (job.kind === 'module') {
      let code = known !== undefined && !('glue' in known) ? known : undefined;
      if (job.code !== undefined && code === undefined) {
        const { module, memory } = job.code;
        code = {
          module,
          slot: memory === undefined ? undefined : new MemorySlot(memory, false, unwiped),
          names: preview1Imports(WA.Module.imports(module)),
        };
      }
      if (code === undefined) return { type: 'missing', id };
      remember(job.key, code);
      return runModule(id, job, code);
    }
    let code = known !== undefined && 'glue' in known ? known : undefined;
    // Keys name content (hash, cap, transpiler): code already held for the key is that code.
    if (job.code !== undefined && code === undefined) {
      // A data: URL imports once per worker (the loader keeps it); the glue is reused for every call.
      const glue = (await import(job.code.jsUrl)) as TranspiledComponent;
      const { modules, memories } = job.code;
      const slots = new Map<WasmModule, MemorySlot>();
      for (const [name, limits] of Object.entries(memories)) {
        const module = modules[name];
        if (module !== undefined) slots.set(module, new MemorySlot(limits, true, unwiped));
      }
      code = { glue, modules, slots, probesOnly: onlyJspiProbes(job.code.jsUrl) };
    }
    if (code === undefined) return { type: 'missing', id };
    remember(job.key, code);
    return runComponent(id, job, code, toMain);
  } catch (err) {
    return { type: 'failed', id, message: describe(err) };
  }
}

/** How long an idle worker sleeps on its doorbell before giving its event loop a turn (V8's housekeeping). */
const IDLE_TURN_MS = 1000;

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * Serves jobs from the pool (worker-pool.ts): between jobs this thread sleeps on the doorbell, a shared
 * flag the pool sets (Atomics.notify) after queueing a job on the port, and takes the job off the port
 * synchronously. A call then costs neither a turn of this thread's event loop nor Node's message event
 * dispatch on the way in. The thread is blocked while it waits: the pool still stops it with
 * terminate(), which interrupts Atomics.wait, as it does a guest's loop.
 */
async function serve({ port, bell }: WorkerChannel): Promise<void> {
  const flag = new Int32Array(bell);
  for (;;) {
    // Cleared before looking, so a job queued after the look rings a bell this thread then sees.
    Atomics.store(flag, 0, 0);
    const received = receiveMessageOnPort(port) as { message: JobRequest } | undefined;
    if (received === undefined) {
      if (Atomics.wait(flag, 0, 0, IDLE_TURN_MS) === 'timed-out') await nextTurn();
      continue;
    }
    const { id, job } = received.message;
    const reply = await executeJob(id, job, (call, transfer) => {
      port.postMessage(call, transfer);
      Atomics.store(flag, 1, 1);
    });
    port.postMessage(reply, transferOf(reply));
    // Set after the reply is queued: a pool watching for it takes it off the port (see watchReply).
    Atomics.store(flag, 1, 1);
    wipeSpares();
    // One turn of the event loop per job, off the call's path: tasks V8 posted meanwhile run here.
    await nextTurn();
  }
}

const channel = (workerData as { channel?: WorkerChannel } | null)?.channel;
// Started after this module finished evaluating (the loop blocks this thread between jobs).
if (channel !== undefined) setImmediate(() => void serve(channel));
