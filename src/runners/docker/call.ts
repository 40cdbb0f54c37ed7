import type { Duplex } from 'node:stream';
import { CapsuleError } from '../../base/errors.js';
import { OutputDemuxer } from './demux.js';
import { engineMessage } from './engine.js';
import type { ContainerSpec, DockerEngine, PidsHits } from './engine.js';
import type { RunResult } from '../types.js';

/** A container created and attached ahead of its call; started exactly once, then removed. */
export interface PreparedContainer {
  id: string;
  stream: Duplex;
  /** Settles when the attach stream ends or closes (all output read). */
  ended: Promise<void>;
  /** Started ahead of the call, parked in the watchdog (see watchdogEntrypoint) until it gets its go line. */
  started: boolean;
  /** When it was started ahead (performance.now()); it exits on its own once its parked-idle deadline passes. */
  parkedAt: number;
  /** The attach stream closed while the container waited: it died (engine restart…) and must not be used. */
  dead: boolean;
  /** Cancels the pool's timer that removes it when it stays unused (PrewarmPool). */
  cancelIdle?: (() => void) | undefined;
  /** Output that arrived while parked (only the watchdog's own lines): handed to the call, once. */
  takeEarly?: (() => Buffer[]) | undefined;
}

/**
 * PID 1 of every container capsule runs: the capability's deadline lives inside the container, so nothing
 * outlives its budget even when capsule dies without cleaning up (SIGKILL) or hangs with its engine
 * connection open. Arguments: run deadline and parked-idle deadline in seconds (0: not parked), the busybox
 * prefix for applets (see WatchdogTools), then the command.
 * - Parked (started ahead of its call): `read -t` waits for exactly one go line (busybox sh reads a pipe byte
 *   by byte, so the rest of stdin stays for the capability). No line in time, or EOF because capsule's
 *   attach connection went away, and the container exits without running anything of the capability.
 * - Then the command runs as a child, and PID 1 itself waits on a private fifo with `read -t`: the timer is
 *   the shell's own poll, not a process the capability (same user) could kill. The child's exit status
 *   arrives on the fifo and becomes the container's; at the deadline PID 1 exits, and the kernel kills every
 *   process of the container with it. Anything the capability does to the fifo can only end it sooner.
 * - Run anywhere but as PID 1, at the deadline it asks PID 1 to end the container instead. (Reset-reusable
 *   containers, exec-pool.ts, hold each call's deadline in their own PID 1.)
 */
const WATCHDOG_SCRIPT = [
  'run=$1 idle=$2 bb=$3; shift 3',
  // Made before parking, off the call's path. Left in place: the capability can reach it through
  // /proc/1/fd/4 anyway, and can only end its run sooner.
  'f=/tmp/.capsule-watchdog-$$',
  '$bb mkfifo -m 600 "$f" && exec 4<>"$f" || { echo "capsule-watchdog: no fifo in /tmp" >&2; exit 125; }',
  'if [ "$idle" != 0 ]; then read -r -t "$idle" _ || { echo "capsule-watchdog: no call before the idle deadline" >&2; exit 125; }; fi',
  'exec 3<&0 0</dev/null',
  '{ "$@" <&3 3<&- 4>&-; echo "$?" >&4; } &',
  'exec 3<&-',
  // The child is done. Had the pids limit refused a fork, PID 1 holds the container (and its cgroup) a
  // moment, so capsule reads the kernel's own counter from the host before the engine removes it: the
  // report comes from the kernel, this only keeps it readable (shell builtins, nothing forked).
  'if read -r -t "$run" s <&4; then',
  // Only as PID 1: a reused container's counter (exec-pool.ts) spans its earlier calls.
  '  [ "$$" = 1 ] && for e in /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events; do',
  '    [ -r "$e" ] && while read -r k v; do [ "$k" = max ] && [ "$v" != 0 ] && read -r -t 2 _ <&4; done <"$e"',
  '  done',
  '  exit "$s"',
  'fi',
  // Not PID 1 (run by exec): PID 1 ends the container on USR1 (see exec-pool.ts).
  '[ "$$" = 1 ] || kill -USR1 1 2>/dev/null',
  'exit 137',
].join('\n');
const WATCHDOG_NAME = 'capsule-watchdog';

/** How long PID 1 lets the capability run past capsule's own timer, so capsule's kill (and report) comes first. */
export const WATCHDOG_GRACE_MS = 1000;

/** Where the watchdog's shell comes from: the image's own busybox, or one mounted in from capsule's image. */
export interface WatchdogTools {
  /** The shell command line (busybox sh). */
  sh: readonly string[];
  /** Prefix that runs a busybox applet ('' when the applets are on the image's PATH). */
  bb: string;
}

/** capsule's images: busybox is the userland. */
export const IMAGE_TOOLS: WatchdogTools = { sh: ['/bin/sh'], bb: '' };
/** Any other image: capsule/busybox's binary, mounted read-only from a volume (see DockerRunner). */
export const TOOLS_MOUNT = '/.capsule';
export const MOUNTED_TOOLS: WatchdogTools = {
  sh: [`${TOOLS_MOUNT}/busybox`, 'sh'],
  bb: `${TOOLS_MOUNT}/busybox`,
};

/** The entrypoint that puts a deadline inside the container, in front of the command. */
export function watchdogEntrypoint(
  runMs: number,
  parkedIdleMs: number | undefined,
  tools: WatchdogTools = IMAGE_TOOLS,
): string[] {
  return [
    ...tools.sh,
    '-c',
    WATCHDOG_SCRIPT,
    WATCHDOG_NAME,
    seconds(runMs),
    parkedIdleMs === undefined ? '0' : seconds(parkedIdleMs),
    tools.bb,
  ];
}

/** Milliseconds as the decimal seconds busybox `read -t` takes. */
export function seconds(ms: number): string {
  return (Math.max(1, Math.ceil(ms)) / 1000).toFixed(3);
}

/** The parked-idle deadline of a spec's watchdog, in ms; undefined when its containers are not started ahead. */
export function parkedIdleMs(spec: ContainerSpec): number | undefined {
  const e = spec.entrypoint ?? [];
  const at = e.indexOf(WATCHDOG_NAME);
  if (at < 2 || e[at - 1] !== WATCHDOG_SCRIPT) return undefined;
  const idle = Number(e[at + 2]);
  return Number.isFinite(idle) && idle > 0 ? idle * 1000 : undefined;
}

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

export type KilledBy = 'timeout' | 'abort' | 'overflow' | 'pids' | undefined;

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
    ...(killedBy === 'pids' ? { pidsLimited: true } : {}),
    started: true,
  };
}

/** How often a running container's pids counter is read (the shell runner polls its cgroup the same way). */
const PIDS_POLL_MS = 25;

/**
 * Watches the kernel's counter of forks the container's pids limit refused (`source`: the counter, or a
 * promise of it; undefined when the engine cannot show it, see DockerEngine.pidsHits), and calls `onHit`
 * at the first refusal past `baseline` (the count before the call: a reused container's earlier ones). The
 * run is then stopped, as a shell run is.
 */
export function watchPids(
  source: PidsHits | Promise<PidsHits | undefined> | undefined,
  onHit: () => void,
  baseline = 0,
): { stop: () => void; check: () => void } {
  let hits: PidsHits | undefined;
  let stopped = false;
  const check = (): void => {
    const n = hits?.();
    if (n !== undefined && n > baseline) {
      stop();
      onHit();
    }
  };
  const timer = setInterval(check, PIDS_POLL_MS);
  timer.unref();
  const stop = (): void => {
    stopped = true;
    clearInterval(timer);
  };
  Promise.resolve(source)
    .then((found) => {
      if (stopped) return;
      hits = found;
      if (found === undefined) stop();
      else check();
    })
    .catch(() => stop());
  return { stop, check };
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
  /** The clock `parkedAt` is read from (the prewarm pool's). */
  now: () => number = () => performance.now(),
): Promise<PreparedContainer> {
  const id = await engine.createContainer(spec);
  try {
    const stream = await engine.attach(id);
    // Errors on the attach socket (EPIPE when the container ignores stdin, an engine restart) surface
    // through start()/wait(); without a listener they would crash the process.
    stream.on('error', () => {});
    const prepared: PreparedContainer = {
      id,
      stream,
      ended: Promise.resolve(),
      started: false,
      parkedAt: 0,
      dead: false,
    };
    prepared.ended = new Promise<void>((resolve) => {
      const done = (): void => {
        prepared.dead = true;
        resolve();
      };
      stream.once('end', done);
      stream.once('close', done);
    });
    if (isGated(spec)) {
      // Read while parked, so the stream ends (and `dead` is set) as soon as the container exits on its own
      // idle deadline; what arrives before the call is kept for it.
      const early: Buffer[] = [];
      const keep = (chunk: Buffer): void => {
        early.push(chunk);
      };
      stream.on('data', keep);
      prepared.takeEarly = () => {
        stream.off('data', keep);
        return early.splice(0);
      };
      await engine.start(id);
      prepared.started = true;
      prepared.parkedAt = now();
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
  const kill = (why: Exclude<KilledBy, undefined>): void => {
    if (killedBy !== undefined) return;
    killedBy = why;
    // SIGKILL straight away: a container that ignores SIGTERM gets no grace period to abuse.
    engine.kill(id).catch(() => {});
  };
  const demux = new OutputDemuxer(limits.outputBytes, () => kill('overflow'));
  for (const chunk of prepared.takeEarly?.() ?? []) demux.push(chunk);
  stream.on('data', (chunk: Buffer) => demux.push(chunk));

  if (signal?.aborted === true) {
    stream.destroy();
    return { ...blank(demux), canceled: true, started: false };
  }

  const timer = setTimeout(() => kill('timeout'), limits.timeoutMs);
  const onAbort = (): void => kill('abort');
  signal?.addEventListener('abort', onAbort, { once: true });
  let pids: { stop: () => void; check: () => void } | undefined;
  try {
    try {
      if (!prepared.started) await engine.start(id);
    } catch (err) {
      stream.destroy();
      throw new CapsuleError(
        'RUNNER_FAILED',
        `the container could not start: ${engineMessage(err)}`,
        {
          field: 'entry',
          hint: 'check that the interpreter exists in the image (capsule/busybox has sh; capsule/node has node and sh) and that entry is executable when no interpreter is set',
        },
        { cause: err },
      );
    }
    // A kill issued while start() was in flight found nothing running yet: issue it again.
    if (killedBy !== undefined) await engine.kill(id).catch(() => {});
    // A fresh container: every fork its limit refused is this call's.
    pids = watchPids(engine.pidsHits?.(id), () => kill('pids'));
    // Half-close: the container sees EOF on stdin and output keeps flowing back.
    stream.end(prepared.started ? GO_LINE + input : input);
    const code = await engine.wait(id);
    // The last look, in case the limit was hit since the last poll (the cgroup may already be gone).
    pids.check();
    pids.stop();
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
    if (prepared.started && code === 125 && killedBy === undefined) {
      // Only the watchdog prints this, before anything of the capability ran: it expired just as it was taken.
      if (/^capsule-watchdog: no call before the idle deadline$/m.test(demux.stderr())) {
        throw new CapsuleError(
          'RUNNER_FAILED',
          'the prestarted container reached its idle deadline before the call',
          {
            hint: 'run the call again (a fresh container is prepared for it)',
          },
        );
      }
    }
    if ((code === 126 || code === 127) && killedBy === undefined) {
      // The watchdog could not run the command: the same failure as a plain start of a missing program.
      const missing = /capsule-watchdog: line \d+: (.+): (not found|Permission denied)/.exec(demux.stderr());
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
    pids?.stop();
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

export function isGated(spec: ContainerSpec): boolean {
  return parkedIdleMs(spec) !== undefined;
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
