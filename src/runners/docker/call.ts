import type { Duplex } from 'node:stream';
import { CapsuleError } from '../../errors.js';
import { OutputDemuxer } from './demux.js';
import { engineMessage } from './dockerode-engine.js';
import type { ContainerSpec, DockerEngine } from './engine.js';
import type { RunResult } from '../types.js';

/** A container created and attached ahead of its call; started exactly once, then removed. */
export interface PreparedContainer {
  id: string;
  stream: Duplex;
  /** Settles when the attach stream ends or closes (all output read). */
  ended: Promise<void>;
  /** Started ahead of the call, parked in the gate (see GATE_ENTRYPOINT) until it gets its go line. */
  started: boolean;
  /** The attach stream closed while the container waited: it died (engine restart…) and must not be used. */
  dead: boolean;
}

/**
 * A pre-started container waits in this gate: `read` consumes exactly one line (busybox sh reads a pipe
 * byte by byte), then the real command replaces the shell as pid 1 with the rest of stdin untouched.
 * Nothing of the capability runs before its call; the container is used for that one call only.
 */
export const GATE_ENTRYPOINT = ['/bin/sh', '-c', 'read -r _ && exec "$@"', 'capsule-gate'];
const GO_LINE = 'go\n';

export interface CallLimits {
  timeoutMs: number;
  outputBytes: number;
}

/** The runner's result before it adds environment and duration. */
export interface CallOutcome extends Omit<RunResult, 'environment' | 'durationMs'> {
  /** False when the call was canceled before the container started. */
  started: boolean;
}

export type KilledBy = 'timeout' | 'abort' | 'overflow' | undefined;

/** The outcome of a container process that ran: who killed it (if anyone) decides what is reported. */
export function finishedOutcome(
  code: number | null,
  killedBy: KilledBy,
  oomKilled: boolean,
  demux: OutputDemuxer,
): CallOutcome {
  const killed = killedBy !== undefined || oomKilled;
  return {
    exitCode: killed ? null : code,
    signal: killed ? 'SIGKILL' : null,
    stdout: demux.stdout(),
    stderr: demux.stderr(),
    timedOut: killedBy === 'timeout',
    canceled: killedBy === 'abort',
    truncated: demux.truncated,
    oomKilled,
    started: true,
  };
}

/** After the container exits, give the attach stream this long to deliver its last bytes. */
const STREAM_DRAIN_MS = 2000;

/**
 * Create + attach (before start, so no output is lost), and start it too when its spec is gated.
 * The container is removed again if any step fails.
 */
export async function prepareContainer(
  engine: DockerEngine,
  spec: ContainerSpec,
): Promise<PreparedContainer> {
  const id = await engine.createContainer(spec);
  try {
    const stream = await engine.attach(id);
    // Errors on the attach socket (EPIPE when the container ignores stdin, an engine restart) surface
    // through start()/wait(); without a listener they would crash the process.
    stream.on('error', () => {});
    const prepared: PreparedContainer = { id, stream, ended: Promise.resolve(), started: false, dead: false };
    prepared.ended = new Promise<void>((resolve) => {
      const done = (): void => {
        prepared.dead = true;
        resolve();
      };
      stream.once('end', done);
      stream.once('close', done);
    });
    if (isGated(spec)) {
      await engine.start(id);
      prepared.started = true;
    }
    return prepared;
  } catch (err) {
    await engine.remove(id).catch(() => {});
    throw err;
  }
}

/**
 * One call on a prepared container: start it, write the input to stdin, collect capped output,
 * and kill it on timeout, abort or output overflow. The caller removes the container afterwards.
 */
export async function runPrepared(
  engine: DockerEngine,
  prepared: PreparedContainer,
  input: string,
  limits: CallLimits,
  signal: AbortSignal | undefined,
): Promise<CallOutcome> {
  const { id, stream } = prepared;
  let killedBy: KilledBy;
  const kill = (why: 'timeout' | 'abort' | 'overflow'): void => {
    if (killedBy !== undefined) return;
    killedBy = why;
    // SIGKILL straight away: a container that ignores SIGTERM gets no grace period to abuse.
    engine.kill(id).catch(() => {});
  };
  const demux = new OutputDemuxer(limits.outputBytes, () => kill('overflow'));
  stream.on('data', (chunk: Buffer) => demux.push(chunk));

  if (signal?.aborted === true) {
    stream.destroy();
    return { ...blank(demux), canceled: true, started: false };
  }

  const timer = setTimeout(() => kill('timeout'), limits.timeoutMs);
  const onAbort = (): void => kill('abort');
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    try {
      if (!prepared.started) await engine.start(id);
    } catch (err) {
      stream.destroy();
      throw new CapsuleError('RUNNER_FAILED', `the container could not start: ${engineMessage(err)}`, {
        field: 'entry',
        hint: 'check that the interpreter exists in the image (capsule/busybox has sh; capsule/node has node and sh) and that entry is executable when no interpreter is set',
      });
    }
    // A kill issued while start() was in flight found nothing running yet: issue it again.
    if (killedBy !== undefined) await engine.kill(id).catch(() => {});
    // Half-close: the container sees EOF on stdin and output keeps flowing back.
    stream.end(prepared.started ? GO_LINE + input : input);
    const code = await engine.wait(id);
    await Promise.race([
      prepared.ended,
      new Promise((resolve) => setTimeout(resolve, STREAM_DRAIN_MS).unref()),
    ]);
    stream.destroy();

    // 137 = SIGKILL: ours, or the kernel's OOM killer; only then is the inspect worth its round trip.
    let oomKilled = false;
    if (code === 137 || (killedBy === undefined && code > 128)) {
      oomKilled = (await engine.inspect(id).catch(() => ({ oomKilled: false }))).oomKilled;
    }
    if (prepared.started && (code === 126 || code === 127) && killedBy === undefined) {
      // The gate could not exec the command: the same failure as a plain start of a missing program.
      const missing = /capsule-gate: exec: (.+): (not found|Permission denied)/.exec(demux.stderr());
      if (missing !== null) {
        throw new CapsuleError(
          'RUNNER_FAILED',
          `the container could not start: ${missing[1] ?? 'the command'}: ${missing[2] ?? 'failed'}`,
          {
            field: 'interpreter',
            hint: 'check that the interpreter exists in the image (capsule/busybox has sh; capsule/node has node and sh), or make entry executable when no interpreter is set',
          },
        );
      }
    }
    return finishedOutcome(code, killedBy, oomKilled, demux);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

export function isGated(spec: ContainerSpec): boolean {
  return (
    spec.entrypoint !== undefined &&
    spec.entrypoint.length === GATE_ENTRYPOINT.length &&
    spec.entrypoint.every((a, i) => a === GATE_ENTRYPOINT[i])
  );
}

function blank(demux: OutputDemuxer): CallOutcome {
  return {
    exitCode: null,
    signal: null,
    stdout: demux.stdout(),
    stderr: demux.stderr(),
    timedOut: false,
    canceled: false,
    truncated: false,
    oomKilled: false,
    started: false,
  };
}
