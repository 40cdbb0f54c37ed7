/**
 * Pooled worker of the WasmRunner: instantiates a fresh instance per job and runs it.
 * It imports only `node:` builtins and sibling worker modules (the preview2 host): under vitest they
 * are transpiled to data: URLs, from dist it is loaded as worker.js. The main thread enforces wall
 * time by terminating this worker.
 */
import { openSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { setFlagsFromString } from 'node:v8';
import { WASI } from 'node:wasi';
import type { ComponentJob, Job, JobReply, ModuleJob } from './protocol.js';
import type { WasmImports, WasmInstance, WasmMemory, WasmModule, WebAssemblyApi } from './wasm-types.js';
import { preview2Imports, type Preview2Host } from './preview2-host.js';
import { blockingHttp } from './http-bridge.js';

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
// WASI preview1 errno values used by the read-only guard.
const E_BADF = 8;
const E_FAULT = 21;
const E_NOTSUP = 58;
const E_ROFS = 69;
// Rights / flags that mean "may modify" on path_open.
const RIGHT_FD_WRITE = 1n << 6n;
const RIGHT_FD_ALLOCATE = 1n << 8n;
const RIGHT_FD_FILESTAT_SET_SIZE = 1n << 22n;
const RIGHT_FD_FILESTAT_SET_TIMES = 1n << 23n;
const WRITE_RIGHTS =
  RIGHT_FD_WRITE | RIGHT_FD_ALLOCATE | RIGHT_FD_FILESTAT_SET_SIZE | RIGHT_FD_FILESTAT_SET_TIMES;
const OFLAG_CREAT = 1;
const OFLAG_TRUNC = 8;
const OFLAG_DIRECTORY = 2;
const FDFLAG_APPEND = 1;

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

  bytes(): Uint8Array {
    return Buffer.concat(this.chunks);
  }
}

const devNull = openSync('/dev/null', 'r+');

function post(reply: JobReply): void {
  // Copied, not transferred: Buffer.concat may hand out a slice of Node's shared pool.
  parentPort?.postMessage(reply);
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Wraps node:wasi's preview1 functions: stdio in memory with caps, read-only preopens, no symlink creation. */
function wrapPreview1(
  base: Record<string, (...args: never[]) => unknown>,
  job: ModuleJob,
  memory: () => WasmMemory | undefined,
  stdout: Sink,
  stderr: Sink,
): Record<string, unknown> {
  const roFds = new Set<number>();
  // node:wasi numbers preopens 3, 4, … in insertion order.
  job.preopens.forEach((p, i) => {
    if (p.readOnly) roFds.add(3 + i);
  });
  let stdinPos = 0;
  const view = (): DataView | undefined => {
    const m = memory();
    return m === undefined ? undefined : new DataView(m.buffer);
  };
  // Wasm passes i32 as signed JS numbers; node:wasi's native functions expect the unsigned view
  // (what they receive when Wasm calls them directly), so convert before delegating.
  const call = (name: string, ...args: unknown[]): number =>
    (base[name] as unknown as (...a: unknown[]) => number)(
      ...args.map((a) => (typeof a === 'number' ? a >>> 0 : a)),
    );

  // A guest pointer outside its memory is EFAULT, not a host exception.
  const faultSafe =
    <A extends unknown[]>(fn: (...args: A) => number) =>
    (...args: A): number => {
      try {
        return fn(...args);
      } catch (err) {
        if (err instanceof RangeError) return E_FAULT;
        throw err;
      }
    };

  const wrapped: Record<string, unknown> = { ...base };
  // Pointers arrive as signed i32: `>>> 0` gives the address (memories past 2 GiB).
  wrapped.fd_write = faultSafe(
    (fd: number, iovsArg: number, iovsLen: number, nwrittenArg: number): number => {
      const iovs = iovsArg >>> 0;
      const nwritten = nwrittenArg >>> 0;
      if (fd !== 1 && fd !== 2) return roFds.has(fd) ? E_BADF : call('fd_write', fd, iovs, iovsLen, nwritten);
      const dv = view();
      const m = memory();
      if (dv === undefined || m === undefined) return E_BADF;
      const sink = fd === 1 ? stdout : stderr;
      let total = 0;
      for (let i = 0; i < iovsLen; i++) {
        const ptr = dv.getUint32(iovs + i * 8, true);
        const len = dv.getUint32(iovs + i * 8 + 4, true);
        sink.write(new Uint8Array(m.buffer, ptr, len));
        total += len;
      }
      dv.setUint32(nwritten, total, true);
      return 0;
    },
  );
  wrapped.fd_read = faultSafe((fd: number, iovsArg: number, iovsLen: number, nreadArg: number): number => {
    const iovs = iovsArg >>> 0;
    const nread = nreadArg >>> 0;
    if (fd !== 0) return call('fd_read', fd, iovs, iovsLen, nread);
    const dv = view();
    const m = memory();
    if (dv === undefined || m === undefined) return E_BADF;
    let total = 0;
    for (let i = 0; i < iovsLen && stdinPos < job.stdin.length; i++) {
      const ptr = dv.getUint32(iovs + i * 8, true);
      const len = dv.getUint32(iovs + i * 8 + 4, true);
      const chunk = job.stdin.subarray(stdinPos, stdinPos + len);
      new Uint8Array(m.buffer, ptr, chunk.length).set(chunk);
      stdinPos += chunk.length;
      total += chunk.length;
    }
    dv.setUint32(nread, total, true);
    return 0;
  });
  // node:wasi answers EINVAL to environ_get when the environment is empty (capsule's default).
  if (Object.keys(job.env).length === 0) wrapped.environ_get = (): number => 0;
  wrapped.path_open = (
    dirfd: number,
    dirflags: number,
    path: number,
    pathLen: number,
    oflags: number,
    rightsBase: bigint,
    rightsInheriting: bigint,
    fdflags: number,
    fdOut: number,
  ): number => {
    const ro = roFds.has(dirfd);
    if (ro && ((oflags & (OFLAG_CREAT | OFLAG_TRUNC)) !== 0 || (fdflags & FDFLAG_APPEND) !== 0))
      return E_ROFS;
    let base = rightsBase;
    let inheriting = rightsInheriting;
    if (ro) {
      // Opening for writing on a ro grant fails at open, like a read-only mount. Other modifying
      // rights are dropped, not refused: wasi-libc asks for every right its mode allows (O_RDONLY
      // included set-times), and the fd-level guards below refuse those calls on ro fds anyway.
      const dirOpen = (oflags & OFLAG_DIRECTORY) !== 0;
      if (!dirOpen && (BigInt.asUintN(64, rightsBase) & RIGHT_FD_WRITE) !== 0n) return E_ROFS;
      base = BigInt.asIntN(64, BigInt.asUintN(64, base) & ~WRITE_RIGHTS);
      inheriting = BigInt.asIntN(64, BigInt.asUintN(64, inheriting) & ~WRITE_RIGHTS);
    }
    const ret = call('path_open', dirfd, dirflags, path, pathLen, oflags, base, inheriting, fdflags, fdOut);
    if (ret === 0 && ro) {
      const dv = view();
      if (dv !== undefined) roFds.add(dv.getUint32(fdOut >>> 0, true));
    }
    return ret;
  };
  const denyOnRo =
    (name: string, ...fdArgs: number[]) =>
    (...args: unknown[]): number => {
      if (fdArgs.some((i) => roFds.has(args[i] as number))) return E_ROFS;
      return call(name, ...args);
    };
  wrapped.path_create_directory = denyOnRo('path_create_directory', 0);
  wrapped.path_remove_directory = denyOnRo('path_remove_directory', 0);
  wrapped.path_unlink_file = denyOnRo('path_unlink_file', 0);
  wrapped.path_rename = denyOnRo('path_rename', 0, 3);
  wrapped.path_link = denyOnRo('path_link', 0, 4);
  wrapped.path_filestat_set_times = denyOnRo('path_filestat_set_times', 0);
  wrapped.fd_pwrite = denyOnRo('fd_pwrite', 0);
  wrapped.fd_allocate = denyOnRo('fd_allocate', 0);
  wrapped.fd_filestat_set_size = denyOnRo('fd_filestat_set_size', 0);
  wrapped.fd_filestat_set_times = denyOnRo('fd_filestat_set_times', 0);
  // node:wasi sleeps for a clock subscription in native code, which worker.terminate() cannot
  // interrupt (a guest asking to sleep for years would pin the thread after its timeout). Pure
  // clock polls sleep in Atomics.wait instead, which terminate() does interrupt.
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  wrapped.poll_oneoff = faultSafe(
    (inArg: number, outArg: number, nsubs: number, neventsArg: number): number => {
      const inPtr = inArg >>> 0;
      const outPtr = outArg >>> 0;
      const neventsPtr = neventsArg >>> 0;
      const dv = view();
      if (dv === undefined || nsubs === 0) return call('poll_oneoff', inPtr, outPtr, nsubs, neventsPtr);
      const waits: Array<bigint | undefined> = [];
      const ready: number[] = [];
      for (let i = 0; i < nsubs; i++) {
        const sub = inPtr + i * 48;
        if (dv.getUint8(sub + 8) !== 0) {
          // Stdio lives in memory here, so it is always ready; other fds are files, which
          // node:wasi answers at once.
          if (dv.getUint32(sub + 16, true) > 2) return call('poll_oneoff', inPtr, outPtr, nsubs, neventsPtr);
          waits.push(undefined);
          ready.push(i);
          continue;
        }
        const clockId = dv.getUint32(sub + 16, true);
        const timeout = dv.getBigUint64(sub + 24, true);
        const absolute = (dv.getUint16(sub + 40, true) & 1) !== 0;
        const now = clockId === 0 ? BigInt(Date.now()) * 1_000_000n : process.hrtime.bigint();
        waits.push(absolute ? (timeout > now ? timeout - now : 0n) : timeout);
      }
      let n = 0;
      const event = (i: number, type: number, nbytes: bigint, flags: number): void => {
        const ev = outPtr + n * 32;
        dv.setBigUint64(ev, dv.getBigUint64(inPtr + i * 48, true), true);
        dv.setUint16(ev + 8, 0, true);
        dv.setUint8(ev + 10, type);
        dv.setBigUint64(ev + 16, nbytes, true);
        dv.setUint16(ev + 24, flags, true);
        n += 1;
      };
      if (ready.length > 0) {
        for (const i of ready) {
          const type = dv.getUint8(inPtr + i * 48 + 8);
          const fd = dv.getUint32(inPtr + i * 48 + 16, true);
          const left = fd === 0 ? BigInt(job.stdin.length - stdinPos) : 0n;
          // FD_READ on stdin: the bytes left, hang-up at the end; FD_WRITE: room to write.
          if (type === 1) event(i, 1, left, left === 0n ? 1 : 0);
          else event(i, type, 65_536n, 0);
        }
      } else {
        const clocks = waits.filter((w): w is bigint => w !== undefined);
        const least = clocks.reduce((a, b) => (b < a ? b : a));
        if (least > 0n) Atomics.wait(sleeper, 0, 0, Number(least / 1_000n) / 1_000);
        waits.forEach((w, i) => {
          if (w === least) event(i, 0, 0n, 0);
        });
      }
      dv.setUint32(neventsPtr, n, true);
      return 0;
    },
  );

  // node:wasi follows directory symlinks out of a preopen; with no symlink creation and
  // symlink-free disposable copies, there is none to follow.
  wrapped.path_symlink = (): number => E_NOTSUP;
  wrapped.fd_close = (fd: number): number => {
    const ret = call('fd_close', fd);
    if (ret === 0) roFds.delete(fd);
    return ret;
  };
  wrapped.fd_renumber = (from: number, to: number): number => {
    const ret = call('fd_renumber', from, to);
    if (ret === 0) {
      if (roFds.has(from)) roFds.add(to);
      else roFds.delete(to);
      roFds.delete(from);
    }
    return ret;
  };
  return wrapped;
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
  };
}

function runModule(id: number, job: ModuleJob, module: WasmModule): JobReply {
  const stdout = new Sink(job.outputBytes);
  const stderr = new Sink(job.outputBytes);
  let memory: WasmMemory | undefined;
  const wasi = new WASI({
    version: 'preview1',
    args: job.args,
    env: job.env,
    preopens: Object.fromEntries(job.preopens.map((p) => [p.guest, p.host])),
    stdin: devNull,
    stdout: devNull,
    stderr: devNull,
    returnOnExit: true,
  });
  const base = wasi.wasiImport as Record<string, (...args: never[]) => unknown>;
  const imports = { wasi_snapshot_preview1: wrapPreview1(base, job, () => memory, stdout, stderr) };
  let exitCode = 0;
  let truncated = false;
  let trapped = false;
  let instance: WasmInstance | undefined;
  try {
    instance = new WA.Instance(module, imports as WasmImports);
  } catch (err) {
    // A link/type error means it cannot start; a trap in the start function is the guest's own failure.
    if (!(err instanceof WA.RuntimeError) && !(err instanceof OutputLimit)) {
      return { type: 'failed', id, message: describe(err) };
    }
    if (err instanceof OutputLimit) truncated = true;
    else {
      trapped = true;
      exitCode = TRAP;
    }
  }
  if (instance !== undefined) {
    const mem = instance.exports.memory;
    if (mem instanceof WA.Memory) memory = mem;
    if (typeof instance.exports._start !== 'function') {
      return { type: 'failed', id, message: 'the module has no _start export (not a WASI command)' };
    }
    try {
      exitCode = wasi.start(instance);
    } catch (err) {
      if (err instanceof OutputLimit) truncated = true;
      else {
        trapped = true;
        exitCode = TRAP;
        try {
          stderr.write(Buffer.from(`\nwasm trap: ${describe(err)}\n`));
        } catch {
          truncated = true;
        }
      }
    }
  }
  return doneReply(
    id,
    { exitCode, trapped, truncated, stdout, stderr },
    memory === undefined ? [] : [memory],
    job.maxPages,
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
  /** See onlyJspiProbes. */
  probesOnly: boolean;
}

function runComponent(id: number, job: ComponentJob, code: LoadedComponent): JobReply {
  const stdout = new Sink(job.outputBytes);
  const stderr = new Sink(job.outputBytes);
  const memories: WasmMemory[] = [];
  const host = preview2Imports(job, {
    stdout,
    stderr,
    exit: (status) => {
      throw new GuestExit(status);
    },
    http:
      job.network && parentPort !== null && parentPort !== undefined
        ? (request) => blockingHttp((call, transfer) => parentPort?.postMessage(call, transfer), id, request)
        : undefined,
  });
  try {
    return callComponent(id, job, code, host, { stdout, stderr, memories });
  } finally {
    host.dispose();
  }
}

function callComponent(
  id: number,
  job: ComponentJob,
  code: LoadedComponent,
  host: Preview2Host,
  io: { stdout: Sink; stderr: Sink; memories: WasmMemory[] },
): JobReply {
  const { stdout, stderr, memories } = io;
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
        const instance = new WA.Instance(module, imports);
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
  return doneReply(id, { exitCode, trapped, truncated, stdout, stderr }, memories, job.maxPages);
}

/**
 * Compiled code this worker holds, by job key, least recently used first. Only code lives here:
 * every call still builds its own instance, memory, host objects and output sinks.
 */
const codes = new Map<string, WasmModule | LoadedComponent>();
const MAX_CODES = 32;

function remember(key: string, code: WasmModule | LoadedComponent): void {
  codes.delete(key);
  codes.set(key, code);
  while (codes.size > MAX_CODES) {
    const oldest = codes.keys().next().value;
    if (oldest === undefined) break;
    codes.delete(oldest);
  }
}

/** Runs one job in this thread and answers (exported so the bench can measure the in-process floor). */
export async function executeJob(id: number, job: Job): Promise<JobReply> {
  try {
    const known = codes.get(job.key);
    if (job.kind === 'module') {
      const module = job.module ?? (known instanceof WA.Module ? known : undefined);
      if (module === undefined) return { type: 'missing', id };
      remember(job.key, module);
      return runModule(id, job, module);
    }
    let code = known !== undefined && !(known instanceof WA.Module) ? known : undefined;
    // Keys name content (hash, cap, transpiler): code already held for the key is that code.
    if (job.code !== undefined && code === undefined) {
      // A data: URL imports once per worker (the loader keeps it); the glue is reused for every call.
      const glue = (await import(job.code.jsUrl)) as TranspiledComponent;
      code = { glue, modules: job.code.modules, probesOnly: onlyJspiProbes(job.code.jsUrl) };
    }
    if (code === undefined) return { type: 'missing', id };
    remember(job.key, code);
    return runComponent(id, job, code);
  } catch (err) {
    return { type: 'failed', id, message: describe(err) };
  }
}

parentPort?.on('message', (msg: { type: 'run'; id: number; job: Job }) => {
  void executeJob(msg.id, msg.job).then(post);
});
