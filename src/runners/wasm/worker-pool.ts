import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads';
import type { Job, JobReply, JobRequest, JobResult, WorkerChannel } from './protocol.js';
import { answerHttp, type HttpAnswer, type HttpCall, type HttpRequestWire } from './http-bridge.js';

export interface PoolOutcome {
  /** The worker's answer; undefined when the job was stopped (timeout, abort, close) or the worker died. */
  reply: JobResult | undefined;
  timedOut: boolean;
  canceled: boolean;
  /** Set when the worker died on its own (e.g. V8 out of memory in the worker's JS heap). */
  crash: string | undefined;
  /** Set when no worker could be started at all (e.g. the worker script is missing). */
  startError?: unknown;
}

export interface WorkerPoolOptions {
  size: number;
  /** Resolves the worker script (a file URL from dist, a data: URL under vitest). */
  workerUrl: () => Promise<URL>;
  /** JS heap cap per worker; Wasm memory is capped separately by rewriting the module. */
  maxOldGenerationSizeMb?: number | undefined;
}

/** What the call a worker is running listens for; none while the worker is idle. */
interface Listener {
  message(reply: JobReply | HttpCall): void;
  error(err: Error): void;
  exit(code: number): void;
}

interface Slot {
  worker: Worker;
  /** The pool's end of the worker's channel (see WorkerChannel). */
  port: MessagePort;
  bell: Int32Array;
  busy: boolean;
  /** Code keys sent to this worker (it may have dropped some since: it then answers `missing`). */
  known: Set<string>;
  listener: Listener | undefined;
}

/** Young-generation size of each worker's JS heap (see #spawn). */
const YOUNG_GENERATION_MB = 64;

/** Bound on `Slot.known`; forgetting a key only means its code is sent again. */
const MAX_KNOWN = 256;

/** The job without its compiled code, for a worker that already holds the job's key. */
function withoutCode(job: Job): Job {
  return { ...job, code: undefined };
}

interface Task {
  job: Job;
  /** Answers the job's outgoing HTTP (http-bridge.ts); absent: every request is refused. */
  onHttp: ((request: HttpRequestWire) => Promise<HttpAnswer>) | undefined;
  timeoutMs: number;
  signal: AbortSignal | undefined;
  resolve: (outcome: PoolOutcome) => void;
  onQueuedAbort: (() => void) | undefined;
}

/**
 * Reusable worker_threads (a fresh worker costs 50–100 ms; a fresh instance inside a warm one ~1 ms).
 * A worker is terminated — and replaced — when its job times out, is aborted, or the pool closes:
 * terminate() stops a guest even in a tight loop or a looping start function.
 */
export class WorkerPool {
  readonly #options: WorkerPoolOptions;
  readonly #slots: Slot[] = [];
  readonly #queue: Task[] = [];
  #url: Promise<URL> | undefined;
  /** Workers being terminated after a timeout/abort: close() waits until their threads are gone. */
  readonly #dying = new Set<Promise<number>>();
  #nextId = 1;
  #closed = false;

  constructor(options: WorkerPoolOptions) {
    this.#options = options;
  }

  /**
   * Starts workers ahead of the first call (all of them, or up to `count`): a worker's start (~50–100
   * ms) then overlaps whatever the caller does before its first job. A worker that cannot start is
   * dropped here; the job that needs it reports why.
   */
  async warm(count = this.#options.size): Promise<void> {
    const target = Math.min(count, this.#options.size);
    const starting: Array<Promise<void>> = [];
    while (!this.#closed && this.#slots.length < target) {
      // Reserved before the await, so a job pumped meanwhile never starts a worker beyond the size.
      const slot = reservedSlot();
      this.#slots.push(slot);
      starting.push(
        this.#spawn(slot).then(
          () => {
            slot.busy = false;
            if (this.#closed) void slot.worker.terminate();
            else void this.#pump();
          },
          () => {
            const i = this.#slots.indexOf(slot);
            if (i >= 0) this.#slots.splice(i, 1);
            this.#url = undefined;
            void this.#pump();
          },
        ),
      );
    }
    await Promise.all(starting);
  }

  run(
    job: Job,
    options: {
      timeoutMs: number;
      signal?: AbortSignal | undefined;
      onHttp?: ((request: HttpRequestWire) => Promise<HttpAnswer>) | undefined;
    },
  ): Promise<PoolOutcome> {
    return new Promise((resolve) => {
      if (this.#closed || options.signal?.aborted === true) {
        resolve({ reply: undefined, timedOut: false, canceled: true, crash: undefined });
        return;
      }
      const task: Task = {
        job,
        onHttp: options.onHttp,
        timeoutMs: options.timeoutMs,
        signal: options.signal,
        resolve,
        onQueuedAbort: undefined,
      };
      this.#queue.push(task);
      if (options.signal !== undefined) {
        // Removed when the task leaves the queue, so a long-lived signal does not collect listeners.
        task.onQueuedAbort = () => {
          const i = this.#queue.indexOf(task);
          if (i >= 0) {
            this.#queue.splice(i, 1);
            resolve({ reply: undefined, timedOut: false, canceled: true, crash: undefined });
          }
        };
        options.signal.addEventListener('abort', task.onQueuedAbort, { once: true });
      }
      void this.#pump();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const t of this.#queue.splice(0))
      t.resolve({ reply: undefined, timedOut: false, canceled: true, crash: undefined });
    // A slot whose worker is still being spawned has none yet; #pump terminates it once it exists.
    await Promise.all([
      ...this.#slots.splice(0).flatMap((s) => (s.worker === undefined ? [] : [s.worker.terminate()])),
      ...this.#dying,
    ]);
  }

  /** Starts the worker of a reserved slot. */
  async #spawn(slot: Slot): Promise<void> {
    this.#url ??= this.#options.workerUrl();
    const url = await this.#url;
    const { port1, port2 } = new MessageChannel();
    const channel: WorkerChannel = { port: port2, bell: new SharedArrayBuffer(8) };
    const worker = new Worker(url, {
      workerData: { channel },
      transferList: [port2],
      resourceLimits: {
        maxOldGenerationSizeMb: this.#options.maxOldGenerationSizeMb ?? 256,
        // A component call allocates ~0.5 MB of short-lived JS objects (the glue's instantiate, the
        // instances' wrappers). In a worker's default young generation they outlive scavenges and
        // are promoted; at 64 MB they die young: component throughput on 2 workers ~950 -> ~1150/s.
        maxYoungGenerationSizeMb: YOUNG_GENERATION_MB,
      },
      // No inherited flags (--input-type, --inspect, …) and no host environment in the worker.
      execArgv: [],
      env: {},
      // The guest never writes to the worker's process streams; keep any stray output off ours.
      stdout: true,
      stderr: true,
    });
    worker.stdout.resume();
    worker.stderr.resume();
    worker.unref();
    slot.worker = worker;
    slot.port = port1;
    slot.bell = new Int32Array(channel.bell);
    // One set of listeners for the worker's life, handing each event to the call it is running: an
    // idle worker that dies (or errs) is simply dropped from the pool.
    port1.on('message', (msg: JobReply | HttpCall) => slot.listener?.message(msg));
    worker.on('error', (err) => this.#lost(slot, (l) => l.error(err)));
    worker.on('exit', (code) => this.#lost(slot, (l) => l.exit(code)));
    // The channel alone never keeps the process alive (a call's timer does while it runs).
    port1.unref();
  }

  /** A worker erred or exited: its call (if any) ends; an idle one leaves the pool. */
  #lost(slot: Slot, tell: (listener: Listener) => void): void {
    if (slot.listener !== undefined) {
      tell(slot.listener);
      return;
    }
    const i = this.#slots.indexOf(slot);
    if (i >= 0 && !slot.busy) {
      this.#slots.splice(i, 1);
      slot.port.close();
    }
  }

  async #pump(): Promise<void> {
    while (this.#queue.length > 0 && !this.#closed) {
      let slot = this.#slots.find((s) => !s.busy);
      if (slot === undefined) {
        if (this.#slots.length >= this.#options.size) return;
        const fresh = reservedSlot();
        this.#slots.push(fresh);
        try {
          await this.#spawn(fresh);
          if (this.#closed) {
            void fresh.worker.terminate();
            return;
          }
        } catch (err) {
          this.#slots.splice(this.#slots.indexOf(fresh), 1);
          const t = this.#queue.shift();
          this.#url = undefined; // retry resolving the script next time
          t?.resolve({
            reply: undefined,
            timedOut: false,
            canceled: false,
            crash: undefined,
            startError: err,
          });
          continue;
        }
        if (this.#closed) {
          void fresh.worker.terminate();
          return;
        }
        fresh.busy = false;
        slot = fresh;
      }
      const task = this.#queue.shift();
      if (task === undefined) return;
      this.#dispatch(slot, task);
    }
  }

  #dispatch(slot: Slot, task: Task): void {
    slot.busy = true;
    if (task.onQueuedAbort !== undefined) task.signal?.removeEventListener('abort', task.onQueuedAbort);
    const id = this.#nextId++;
    const { worker } = slot;
    let settled = false;
    const finish = (outcome: PoolOutcome, kill: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      slot.listener = undefined;
      task.signal?.removeEventListener('abort', onAbort);
      if (kill) {
        // Replace the worker: its guest may still be running.
        const i = this.#slots.indexOf(slot);
        if (i >= 0) this.#slots.splice(i, 1);
        slot.port.close();
        const dying = worker.terminate();
        this.#dying.add(dying);
        void dying.finally(() => this.#dying.delete(dying));
      } else {
        slot.busy = false;
      }
      task.resolve(outcome);
      void this.#pump();
    };
    const onAbort = (): void =>
      finish({ reply: undefined, timedOut: false, canceled: true, crash: undefined }, true);
    slot.listener = {
      message: (reply) => {
        if (reply.id !== id) return;
        if (reply.type === 'http') {
          answerHttp(reply, task.onHttp);
          return;
        }
        if (reply.type === 'missing') {
          // The worker dropped this code (or never had it): same call, now with the code.
          send(slot, { type: 'run', id, job: task.job });
          return;
        }
        finish({ reply, timedOut: false, canceled: false, crash: undefined }, false);
      },
      error: (err) =>
        finish({ reply: undefined, timedOut: false, canceled: false, crash: err.message }, true),
      // A worker stopped by close() ends its call as canceled, not as a crash.
      exit: (code) =>
        finish(
          this.#closed
            ? { reply: undefined, timedOut: false, canceled: true, crash: undefined }
            : {
                reply: undefined,
                timedOut: false,
                canceled: false,
                crash: `worker exited with code ${code}`,
              },
          true,
        ),
    };
    const timer = setTimeout(
      () => finish({ reply: undefined, timedOut: true, canceled: false, crash: undefined }, true),
      task.timeoutMs,
    );
    task.signal?.addEventListener('abort', onAbort, { once: true });
    if (task.signal?.aborted === true) {
      onAbort();
      return;
    }
    const known = slot.known.has(task.job.key);
    if (!known) {
      if (slot.known.size >= MAX_KNOWN) slot.known.clear();
      slot.known.add(task.job.key);
    }
    send(slot, { type: 'run', id, job: known ? withoutCode(task.job) : task.job });
    // The only call in flight: watch for its reply instead of sleeping until the port's message event.
    if (this.#queue.length === 0 && this.#slots.every((s) => s === slot || !s.busy)) {
      watchReply(slot, () => settled);
    }
  }
}

/** How long a lone call's reply is watched for (longer calls get it from the port's message event). */
const WATCH_MS = 2;

/**
 * Polls the worker's reply flag once per turn of the event loop (setImmediate, so timers, I/O and
 * other callbacks still run between polls) and takes whatever the worker posted off the port. A
 * thread that sleeps until the message event pays its wake-up (tens of microseconds on a busy
 * machine) on every call; this keeps the thread awake only while a short call runs.
 */
function watchReply(slot: Slot, settled: () => boolean): void {
  const until = performance.now() + WATCH_MS;
  const poll = (): void => {
    if (settled() || slot.listener === undefined) return;
    if (Atomics.load(slot.bell, 1) !== 0) {
      Atomics.store(slot.bell, 1, 0);
      for (let m = receiveMessageOnPort(slot.port); m !== undefined; m = receiveMessageOnPort(slot.port)) {
        slot.listener?.message(m.message as JobReply | HttpCall);
      }
      if (settled()) return;
    }
    if (performance.now() < until) setImmediate(poll);
  };
  setImmediate(poll);
}

/** A slot whose worker is still starting (busy, so no job is given to it yet). */
function reservedSlot(): Slot {
  return {
    worker: undefined as unknown as Worker,
    port: undefined as unknown as MessagePort,
    bell: undefined as unknown as Int32Array,
    busy: true,
    known: new Set(),
    listener: undefined,
  };
}

/** Queues a job on the worker's port, then rings its doorbell (see serve in worker.ts). */
function send(slot: Slot, request: JobRequest): void {
  Atomics.store(slot.bell, 1, 0);
  slot.port.postMessage(request);
  Atomics.store(slot.bell, 0, 1);
  Atomics.notify(slot.bell, 0);
}
