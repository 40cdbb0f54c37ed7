import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { CapsuleError } from '../../base/errors.js';
import type { Capability } from '../../manifest/types.js';
import {
  WATCHDOG_GRACE_MS,
  finishedOutcome,
  seconds,
  watchPids,
  type CallOutcome,
  type KilledBy,
  type WatchdogTools,
} from './call.js';
import { OutputDemuxer } from './demux.js';
import { engineMessage } from './engine.js';
import type { ContainerSpec, DockerEngine } from './engine.js';
import { ROLE_LABEL } from './labels.js';
import { containerPidsHits } from './pids-events.js';

/** PID 1's own tmpfs (mode 0700, root's): its fifos, out of every call's reach. */
const KEEPALIVE_DIR = '/.capsule-keepalive';
/** PID 1's identity: a uid no call has, and only what the reset and the switch to the call user need. */
const KEEPALIVE_USER = '0:0';
const KEEPALIVE_CAPS = ['KILL', 'SETUID', 'SETGID'];
/**
 * Where PID 1's own copy of busybox lives (a tmpfs only PID 1's user can enter, the one that allows exec):
 * mode 0111, so PID 1 cannot read the file it runs, and the kernel makes a process that runs an unreadable
 * file non-dumpable. Then not even a process of PID 1's own uid may trace it or open /proc/1/mem.
 */
const KEEPER_DIR = '/.capsule-keeper';
/** Its size: room for busybox, added to the container's memory so the copy costs the calls none of theirs. */
const KEEPER_BYTES = 4 * 1024 * 1024;
/** PID 1's first step: its unreadable copy of busybox, then the keep-alive in it (no PATH lookup). */
const KEEPER_PRELUDE = [
  'bb=$1 s=$2',
  'shift 2',
  `k=${KEEPER_DIR}/sh`,
  '$bb cp "$bb" "$k" && $bb chmod 0111 "$k" || exit 125',
  'exec "$k" -c "$s" capsule-keepalive "$@"',
].join('\n');

/**
 * PID 1 of a warm container (busybox sh exists in every capsule image). It lives while capsule holds its
 * stdin open, and at most its lifetime: EOF (capsule's attach connection is gone, e.g. capsule was killed) or
 * the deadline ends the container with every exec in it. USR1 is an exec's own deadline passing (call.ts).
 *
 * It is the one thing a call could use to reach the next call, so no call can touch it: it runs as root, a
 * uid no call has, with only CAP_KILL, CAP_SETUID and CAP_SETGID (startWarm), and each call runs as the call
 * user (`drop`: setsid, then nsenter -S/-G to the spec's user, both exec in place; the kernel clears the
 * permitted and effective sets on that change and no-new-privileges keeps them empty). A call therefore
 * cannot signal, stop, trace or write PID 1 or its helpers (ptrace, /proc/1/mem, /proc/1/fd all need the same
 * uid or CAP_SYS_PTRACE), sits in a session of its own (so not even SIGCONT reaches PID 1's), and cannot open
 * PID 1's fifos: they live in KEEPALIVE_DIR, a tmpfs only root can enter. Between calls capsule resets it in
 * two steps (see ExecPool.reset):
 * - `reset`: kill every other process of the container (`kill -9 -1` with CAP_KILL spares only PID 1,
 *   atomically with respect to fork), then reap the orphans (each external command it waits for collects the
 *   zombies ahead of it) until PID 1 is alone, and say so. That line is only a hint: a process of the call may
 *   still write to the container's output, so capsule then asks the engine, from outside, which processes the
 *   container has.
 * - `check NONCE [first]`, sent only once the engine shows PID 1 alone: whatever a call left in the places the
 *   call user can write is removed by WIPE_SCRIPT, run as the call user (the owner of everything a call can
 *   leave) while no other process of that user is alive to interfere; then PID 1 itself verifies (`clean`):
 *   those places are empty, no SysV shm segment, semaphore set or message queue is left, no unix socket exists
 *   in the container's network namespace (an abstract name a call bound, even one only the kernel still
 *   holds), and it is alone. Only the line `capsule-clean NONCE` passes. The first check, before a new
 *   container's first call, always runs WIPE_SCRIPT, whose own check of its credentials then vouches for
 *   those of every call (the same `drop`).
 * The places the call user can write are the tmpfs /tmp, /dev/shm (POSIX shm) and /dev/mqueue (POSIX message
 * queues); the rest of the container is read-only or root's, as a test that searches for writable places
 * pins. Nothing of this reads memory or files a call could change: the scripts are PID 1's arguments, the
 * tools come from the read-only image (or capsule's read-only tools volume).
 */
const KEEPALIVE_SCRIPT = [
  'trap "exit 137" USR1 TERM',
  'end=$1 bb=$2 uid=$3 gid=$4 strict=$5 wipe=$6',
  'shift 6',
  // busybox ash's own clock (no fork); date where a shell lacks it.
  'end=$(( ${EPOCHSECONDS:-$($bb date +%s)} + end ))',
  `f=${KEEPALIVE_DIR}/status i=${KEEPALIVE_DIR}/input`,
  '$bb mkfifo -m 600 "$f" "$i" || exit 125',
  'echo capsule-keepalive-ready',
  'alone() { for d in /proc/[0-9]*; do [ "${d#/proc/}" = 1 ] || return 1; done; }',
  // A folder that is gone or unreadable would look empty: that fails too. (The three are root's, mode 1777:
  // their modes are not a call's to change.)
  'left() { [ -d "$1" ] && [ -r "$1" ] && [ -x "$1" ] || return 0; for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do if [ -e "$e" ] || [ -L "$e" ]; then return 0; fi; done; return 1; }',
  'clean() {',
  '  for d in /tmp /dev/shm /dev/mqueue; do left "$d" && return 1; done',
  '  for t in sysvipc/shm sysvipc/sem sysvipc/msg net/unix; do',
  '    [ -r /proc/$t ] || return 1',
  '    { read -r _; if read -r _; then return 1; fi; } < /proc/$t',
  '  done',
  '}',
  'drop() { $bb setsid $bb nsenter -S "$uid" -G "$gid" -- "$@"; }',
  'while :; do',
  '  left=$(( end - ${EPOCHSECONDS:-$($bb date +%s)} ))',
  '  [ "$left" -gt 0 ] || exit 0',
  '  read -r -t "$left" cmd arg n run || exit 0',
  '  case "$cmd" in',
  '  run)',
  // One call: its input is the next $n bytes of stdin, its deadline is PID 1's own `read -t` on a private fifo
  // (as in call.ts's watchdog); its exit status comes back on the fifo and goes out after its output.
  // Never past the container's own lifetime. (A fifo keeps no data once nothing has it open: after a reset
  // nothing of the previous call's is left in either.)
  '    case "$run" in ""|*[!0-9.]*) run=1 ;; esac',
  '    [ "${run%.*}" -lt "$left" ] 2>/dev/null || run=$left',
  '    exec 4<>"$f" || { echo "capsule-end $arg 125"; continue; }',
  // The input goes through its own fifo, so the call's status never waits for input it did not read.
  '    exec 3<&0',
  '    $bb head -c "$n" <&3 >"$i" 3<&- 4>&- &',
  '    { drop "$@" <"$i" 3<&- 4>&-; echo "$?" >&4; } &',
  '    exec 3<&-',
  '    read -r -t "$run" s <&4 || exit 137',
  '    exec 4>&-',
  '    echo "capsule-end $arg $s" ;;',
  '  reset)',
  '    kill -9 -1 2>/dev/null',
  '    n=0',
  '    until alone || [ "$n" -ge 500 ]; do n=$((n+1)); $bb usleep 2000; done',
  '    echo capsule-reset-done ;;',
  '  check)',
  '    if [ "$n" = first ] || ! clean; then',
  '      $bb nsenter -S "$uid" -G "$gid" -- $bb sh -c "$wipe" capsule-wipe "$uid" "$gid" "$strict" "$bb" || { echo "capsule-dirty $arg"; continue; }',
  '    fi',
  '    if clean && alone; then echo "capsule-clean $arg"; else echo "capsule-dirty $arg"; fi ;;',
  '  esac',
  'done',
].join('\n');
/**
 * The removal, as the call user with no other process of that user alive (arguments: uid, gid, strict, the
 * busybox prefix). It first checks that it has exactly the credentials every call gets (the call user's uid
 * and gid — real, effective, saved, fs —, no supplementary group but that gid, empty inheritable, permitted,
 * effective and ambient capability sets, no_new_privs) and, when strict, that PID 1 is not the call user;
 * otherwise it exits 1 and the container is not used. Then it empties each place a call can write; PID 1
 * verifies the result.
 */
const WIPE_SCRIPT = [
  'bb=$4 n=0',
  'while read -r k a b c d _; do',
  '  case "$k" in',
  '  Uid:) [ "$a $b $c $d" = "$1 $1 $1 $1" ] || exit 1 ;;',
  '  Gid:) [ "$a $b $c $d" = "$2 $2 $2 $2" ] || exit 1 ;;',
  '  Groups:) [ -z "$a" ] || { [ "$a" = "$2" ] && [ -z "$b" ]; } || exit 1 ;;',
  '  CapInh:|CapPrm:|CapEff:|CapAmb:) [ "$a" = 0000000000000000 ] || exit 1 ;;',
  '  NoNewPrivs:) [ "$a" = 1 ] || exit 1 ;;',
  '  *) continue ;;',
  '  esac',
  '  n=$((n+1))',
  'done </proc/self/status',
  '[ "$n" = 8 ] || exit 1',
  'if [ "$3" = 1 ]; then',
  '  while read -r k a _; do [ "$k" = Uid: ] && break; done </proc/1/status',
  '  [ "$k" = Uid: ] && [ -n "$a" ] && [ "$a" != "$1" ] || exit 1',
  'fi',
  'left() { for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do if [ -e "$e" ] || [ -L "$e" ]; then return 0; fi; done; return 1; }',
  'for d in /tmp /dev/shm /dev/mqueue; do',
  '  left "$d" || continue',
  // One rm for the usual leftovers; folders the call made unreadable get their modes back first.
  '  $bb rm -rf -- "$d"/* "$d"/.[!.]* "$d"/..?* 2>/dev/null',
  '  left "$d" || continue',
  '  $bb chmod -R u+rwX -- "$d"/* "$d"/.[!.]* "$d"/..?* 2>/dev/null',
  '  $bb rm -rf -- "$d"/* "$d"/.[!.]* "$d"/..?* 2>/dev/null',
  'done',
  'exit 0',
].join('\n');
/** A warm container is retired after this many calls, bounding how long one container serves. */
const MAX_USES = 50;
/** No call starts in a warm container with less lifetime left than its timeout plus this. */
const LIFE_MARGIN_MS = 2000;
/** How long the keep-alive and the check may take before the reset counts as failed. */
const RESET_TIMEOUT_MS = 2000;
/** One multiplexed frame of the Engine API's attach stream (see demux.ts). */
function frame(type: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

/** Splits the attach stream into whole frames, so each can go to whoever reads the container now. */
class FrameSplitter {
  private pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer, emit: (type: number, payload: Buffer) => void): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 8) {
      const size = this.pending.readUInt32BE(4);
      if (this.pending.length < 8 + size) return;
      emit(this.pending[0] ?? 1, this.pending.subarray(8, 8 + size));
      this.pending = this.pending.subarray(8 + size);
    }
  }
}

/** Lines of `text` that are exactly `line`. */
function lineCount(text: string, line: string): number {
  return text.split('\n').filter((l) => l === line).length;
}

/** What the keep-alive may write over a container's life before it is treated as tampered with. */
const KEEPALIVE_OUTPUT_BYTES = 64 * 1024;

export interface ExecPoolOptions {
  /** How long a warm container lives at most (its own deadline, held inside it). Default 300000. */
  lifeMs?: number | undefined;
  /** Containers per configuration at most: calls in flight, resetting, starting and idle. Default 8. */
  maxPerKey?: number | undefined;
  /** An idle container unused this long is removed (the pool shrinks back when calls stop). Default 15000. */
  idleMs?: number | undefined;
  /**
   * Tests only, never set by capsule: the keep-alive runs as the call user with no added capability (the
   * separation between PID 1 and the calls switched off), so attack tests can show what it defends against.
   */
  keepaliveAsCallUser?: boolean | undefined;
  /** Tests only, never set by capsule: PID 1 runs from a readable file, so it stays dumpable. */
  keepaliveDumpable?: boolean | undefined;
}

interface Warm {
  id: string;
  /** Host pid of its PID 1 (the keep-alive), as the engine listed it right after the start. */
  initPid: number;
  uses: number;
  startedAt: number;
  /** Its own lifetime (held inside it by the keep-alive). */
  lifeMs: number;
  /** Held open for the container's life: closing it (or capsule dying) ends the container. */
  stdin: Duplex;
  /** The keep-alive's own output (reset acknowledgements), and anything written between calls. */
  output: OutputDemuxer;
  /** The call in progress: receives every frame of the container's output while it runs. */
  sink?: ((type: number, payload: Buffer) => void) | undefined;
  dead: boolean;
  /** Removes it when it stays idle too long. */
  idleTimer?: NodeJS.Timeout | undefined;
}

interface Waiter {
  timeoutMs: number;
  resolve: (warm: Warm) => void;
  reject: (err: unknown) => void;
}

interface KeyState {
  spec: ContainerSpec;
  tools: WatchdogTools;
  idle: Warm[];
  waiters: Waiter[];
  /** Containers being started or reset for this key: each becomes available (or fails) soon. */
  coming: number;
  busy: number;
  /** How many to keep ready: grows when a call finds none ready, shrinks when they sit idle. */
  target: number;
  /** Calls that got a container so far. */
  served: number;
}

/** Why a call did not get a container: it was canceled while it waited. */
class WaitCanceled extends Error {}

/**
 * Warm containers for capabilities marked `docker.reusable`: calls run in a running hardened container
 * (forked by its keep-alive, no runtime exec) instead of a fresh one, and the container is RESET and VERIFIED
 * between calls (KEEPALIVE_SCRIPT) by a keep-alive no call can reach (root with three capabilities; calls run
 * as the spec's user with none): every process but its init killed, /tmp, /dev/shm and /dev/mqueue wiped,
 * SysV IPC and unix sockets none (the container's private IPC namespace has kernel.shm_rmid_forced, so a
 * segment goes with its last process); its environment and working directory come from the spec on every
 * call. A container whose reset cannot be verified is removed, never reused (fail closed). The hardening (no
 * network, read-only rootfs, limits) is the same as for fresh containers; a timed-out, canceled, flooding or
 * OOM-killed call retires its container. Containers are started ahead as demand shows (a call that finds none
 * ready raises the count kept ready, bounded by maxPerKey) and removed again when they sit idle; resets run
 * after the result is returned.
 */
export class ExecPool {
  private readonly engine: DockerEngine;
  private readonly keys = new Map<string, KeyState>();
  private readonly busy = new Set<string>();
  private readonly pending = new Set<Promise<unknown>>();
  private readonly lifeMs: number;
  private readonly maxPerKey: number;
  private readonly idleMs: number;
  private readonly keepaliveAsCallUser: boolean;
  private readonly keepaliveDumpable: boolean;
  private closed = false;

  constructor(engine: DockerEngine, options: ExecPoolOptions = {}) {
    this.engine = engine;
    this.lifeMs = options.lifeMs ?? 300_000;
    this.maxPerKey = Math.max(1, options.maxPerKey ?? 8);
    this.idleMs = options.idleMs ?? 15_000;
    this.keepaliveAsCallUser = options.keepaliveAsCallUser === true;
    this.keepaliveDumpable = options.keepaliveDumpable === true;
  }

  /** Whether a spec can be reset at all: kill -9 -1 and the IPC check need the container's own namespaces. */
  static resettable(spec: ContainerSpec): boolean {
    return spec.pidMode !== 'host' && spec.ipcMode !== 'host';
  }

  async run(
    key: string,
    spec: ContainerSpec,
    capability: Capability,
    input: string,
    signal: AbortSignal | undefined,
    tools: WatchdogTools,
  ): Promise<CallOutcome> {
    const limits = capability.manifest.limits;
    const canceled: CallOutcome = {
      exitCode: null,
      signal: null,
      stdout: '',
      stderr: '',
      timedOut: false,
      canceled: true,
      truncated: false,
      oomKilled: false,
      started: false,
    };
    if (signal?.aborted === true) return canceled;
    let warm: Warm;
    try {
      warm = await this.take(key, spec, tools, limits.timeoutMs, signal);
    } catch (err) {
      if (err instanceof WaitCanceled) return canceled;
      throw err;
    }
    // Counted busy from its handover on (take/offer), so supply() never sees it missing.
    const state = this.stateFor(key, spec, tools);
    this.busy.add(warm.id);
    let retire = false;
    let killedBy: KilledBy;
    const kill = (why: Exclude<KilledBy, undefined>): void => {
      if (killedBy !== undefined) return;
      killedBy = why;
      retire = true;
      // docker cannot kill one exec: the container goes, with everything in it.
      this.engine.kill(warm.id).catch(() => {});
    };
    // The container's counter spans its earlier calls: only refusals past the count before this one are its.
    const hits = this.engine.pidsHits === undefined ? undefined : containerPidsHits(warm.initPid, warm.id);
    const pids = watchPids(hits, () => kill('pids'), hits?.() ?? 0);
    const demux = new OutputDemuxer(limits.outputBytes, () => kill('overflow'));
    const timer = setTimeout(() => kill('timeout'), limits.timeoutMs);
    const onAbort = (): void => kill('abort');
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const code = await this.runInKeepalive(warm, input, limits.timeoutMs + WATCHDOG_GRACE_MS, demux);
      // The container lives on after the exec: its counter is still there to read.
      pids.check();
      pids.stop();
      // Killed by us, or the container ended: it is not reused either way.
      if (code === null) retire = true;
      let oomKilled = false;
      if (killedBy === undefined && code === 137) {
        // The engine sets State.OOMKilled only when a container exits, not for one process in it, so
        // ask the container's memory cgroup (v1 memory.oom_control, v2 memory.events) for its OOM kills.
        // A warm container is retired after any OOM, so a non-zero count is this call's.
        oomKilled = (await this.oomKills(warm.id, spec, tools)) > 0;
        retire = true;
      }
      return finishedOutcome(code, killedBy, oomKilled, demux);
    } finally {
      pids.stop();
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      this.busy.delete(warm.id);
      state.busy--;
      warm.uses++;
      if (retire || this.closed || warm.dead || warm.uses >= MAX_USES) {
        this.discard(warm);
        this.supply(state);
      } else {
        // Off the result's path: the next call takes another ready container meanwhile, or waits for this one.
        state.coming++;
        this.track(
          this.reset(warm).then((clean) => {
            state.coming--;
            if (clean) this.offer(state, warm);
            else {
              this.discard(warm);
              this.supply(state);
            }
          }),
        );
      }
    }
  }

  /**
   * Run one call through the keep-alive (no exec: a fork in the container instead of a runtime exec). The call
   * is named by a fresh nonce, sent only once the container is verified alone with PID 1; its output is what
   * arrives until PID 1's `capsule-end NONCE STATUS` (held back from the call's stdout). Null when the container
   * ended first (killed, deadline, engine).
   */
  private runInKeepalive(
    warm: Warm,
    input: string,
    runMs: number,
    demux: OutputDemuxer,
  ): Promise<number | null> {
    const nonce = randomBytes(16).toString('hex');
    const marker = Buffer.from(`capsule-end ${nonce} `);
    const bytes = Buffer.from(input);
    return new Promise<number | null>((resolve) => {
      let held: Buffer = Buffer.alloc(0);
      const finish = (code: number | null): void => {
        warm.sink = undefined;
        warm.stdin.off('close', onClose);
        resolve(code);
      };
      const onClose = (): void => {
        if (held.length > 0) demux.push(frame(1, held));
        finish(null);
      };
      warm.sink = (type, payload) => {
        if (type !== 1) {
          demux.push(frame(type, payload));
          return;
        }
        held = Buffer.concat([held, payload]);
        const at = held.indexOf(marker);
        if (at >= 0) {
          const end = held.indexOf(0x0a, at);
          if (end < 0) return;
          if (at > 0) demux.push(frame(1, held.subarray(0, at)));
          const status = held.subarray(at + marker.length, end).toString();
          finish(/^\d{1,3}$/.test(status) ? Number(status) : null);
          return;
        }
        // Keep only what could be the start of the marker; the rest is the call's output.
        const keep = marker.length + 8;
        if (held.length > keep) {
          demux.push(frame(1, held.subarray(0, held.length - keep)));
          held = Buffer.from(held.subarray(held.length - keep));
        }
      };
      warm.stdin.once('close', onClose);
      if (warm.dead) {
        onClose();
        return;
      }
      warm.stdin.write(`run ${nonce} ${bytes.length} ${seconds(runMs)}\n`);
      warm.stdin.write(bytes);
    });
  }

  /** Containers per configuration right now, by state (for tests and the bench). */
  counts(key: string): { idle: number; coming: number; busy: number; target: number } {
    const s = this.keys.get(key);
    return { idle: s?.idle.length ?? 0, coming: s?.coming ?? 0, busy: s?.busy ?? 0, target: s?.target ?? 0 };
  }

  /**
   * Reset a used container and verify it (see KEEPALIVE_SCRIPT): true only when, after the reset, the engine
   * lists PID 1 as the container's only process, and PID 1 then answers the check with the fresh nonce.
   * Any failure, timeout or tampering means false: the container is discarded.
   */
  private async reset(warm: Warm): Promise<boolean> {
    if (warm.dead || this.closed) return false;
    try {
      const before = lineCount(warm.output.stdout(), 'capsule-reset-done');
      warm.stdin.write('reset\n');
      if (!(await this.outputUntil(warm, (out) => lineCount(out, 'capsule-reset-done') > before)))
        return false;
      return await this.verify(warm);
    } catch {
      return false;
    }
  }

  /**
   * The engine lists PID 1 as the container's only process (the hint may be forged; the engine's process list
   * is not), then PID 1 answers `check` with a fresh nonce: clean. `first` (a new container): the check also
   * proves a call would get the bare call user.
   */
  private async verify(warm: Warm, first = false): Promise<boolean> {
    const pids = await this.engine.processes(warm.id);
    if (pids.length !== 1 || pids[0] !== warm.initPid) return false;
    const nonce = randomBytes(16).toString('hex');
    warm.stdin.write(`check ${nonce}${first ? ' first' : ''}\n`);
    let verdict: boolean | undefined;
    const answered = await this.outputUntil(warm, (out) => {
      const lines = out.split('\n');
      if (lines.includes(`capsule-clean ${nonce}`)) verdict = true;
      else if (lines.some((l) => l.endsWith(` ${nonce}`))) verdict = false;
      return verdict !== undefined;
    });
    return answered && verdict === true && !warm.dead && !warm.output.truncated;
  }

  /** Wait until the keep-alive's output satisfies `done` (false on timeout, tampering or the container's end). */
  private outputUntil(warm: Warm, done: (out: string) => boolean): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const check = (): void => {
        if (warm.dead || warm.output.truncated) finish(false);
        else if (done(warm.output.stdout())) finish(true);
      };
      const finish = (ok: boolean): void => {
        clearTimeout(timer);
        warm.stdin.off('data', onData);
        warm.stdin.off('close', onClose);
        resolve(ok);
      };
      // Listeners run in order: startWarm's, which pushes the chunk into warm.output, comes first.
      const onData = (): void => check();
      const onClose = (): void => finish(false);
      const timer = setTimeout(() => finish(false), RESET_TIMEOUT_MS);
      warm.stdin.on('data', onData);
      warm.stdin.once('close', onClose);
      check();
    });
  }

  private stateFor(key: string, spec: ContainerSpec, tools: WatchdogTools): KeyState {
    let state = this.keys.get(key);
    if (state === undefined) {
      state = { spec, tools, idle: [], waiters: [], coming: 0, busy: 0, target: 0, served: 0 };
      this.keys.set(key, state);
    }
    return state;
  }

  /** A clean container with lifetime enough for the call: ready now, or the next one reset or started. */
  private take(
    key: string,
    spec: ContainerSpec,
    tools: WatchdogTools,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<Warm> {
    if (this.closed)
      return Promise.reject(new CapsuleError('RUNNER_UNAVAILABLE', 'the docker runner was closed'));
    const state = this.stateFor(key, spec, tools);
    for (let warm = state.idle.pop(); warm !== undefined; warm = state.idle.pop()) {
      clearTimeout(warm.idleTimer);
      if (this.lifeLeft(warm, timeoutMs)) {
        state.busy++;
        state.served++;
        // Keep one more ready than is in use when calls come back to back.
        this.supply(state);
        return Promise.resolve(warm);
      }
      this.discard(warm);
    }
    // None ready for a configuration that has run before: demand is higher than what is kept ready. (Not
    // on its first call, so a one-shot process never starts a container it will not use.)
    if (state.served > 0) state.target = Math.min(this.maxPerKey, state.target + 1);
    state.served++;
    return new Promise<Warm>((resolve, reject) => {
      const waiter: Waiter = {
        timeoutMs,
        resolve: (warm) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(warm);
        },
        reject: (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      };
      const onAbort = (): void => {
        const at = state.waiters.indexOf(waiter);
        if (at >= 0) state.waiters.splice(at, 1);
        reject(new WaitCanceled());
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      state.waiters.push(waiter);
      this.supply(state);
    });
  }

  /** Start containers until every waiter has one coming and `target` are ready or coming, within the bound. */
  private supply(state: KeyState): void {
    if (this.closed) return;
    const total = (): number => state.idle.length + state.coming + state.busy;
    while (
      (state.waiters.length > state.coming || state.idle.length + state.coming < state.target) &&
      total() < this.maxPerKey
    ) {
      state.coming++;
      const timeoutMs = Math.max(0, ...state.waiters.map((w) => w.timeoutMs));
      this.track(
        this.startWarm(state, timeoutMs).then(
          (warm) => {
            state.coming--;
            this.offer(state, warm);
          },
          (err: unknown) => {
            state.coming--;
            // Only a call that has nothing else coming learns of the failure.
            if (state.waiters.length > state.coming) state.waiters.shift()?.reject(err);
          },
        ),
      );
    }
  }

  /** A clean container: to the longest-waiting call it can serve, else ready (or removed past the bound). */
  private offer(state: KeyState, warm: Warm): void {
    if (this.closed || warm.dead) {
      this.discard(warm);
      this.supply(state);
      return;
    }
    const waiter = state.waiters.shift();
    if (waiter !== undefined) {
      if (this.lifeLeft(warm, waiter.timeoutMs)) {
        state.busy++;
        waiter.resolve(warm);
        return;
      }
      state.waiters.unshift(waiter);
      this.discard(warm);
      this.supply(state);
      return;
    }
    state.idle.push(warm);
    warm.idleTimer = setTimeout(() => {
      const at = state.idle.indexOf(warm);
      if (at < 0) return;
      state.idle.splice(at, 1);
      state.target = Math.max(0, state.target - 1);
      this.discard(warm);
    }, this.idleMs);
    warm.idleTimer.unref();
  }

  private lifeLeft(warm: Warm, timeoutMs: number): boolean {
    const left = warm.lifeMs - (performance.now() - warm.startedAt);
    return !warm.dead && left > timeoutMs + WATCHDOG_GRACE_MS + LIFE_MARGIN_MS;
  }

  private discard(warm: Warm): void {
    clearTimeout(warm.idleTimer);
    warm.dead = true;
    warm.stdin.destroy();
    this.track(this.engine.remove(warm.id).catch(() => {}));
  }

  private track(job: Promise<unknown>): void {
    const tracked = job.catch(() => {}).finally(() => this.pending.delete(tracked));
    this.pending.add(tracked);
  }

  async close(): Promise<void> {
    this.closed = true;
    const closedError = new CapsuleError('RUNNER_UNAVAILABLE', 'the docker runner was closed');
    for (const state of this.keys.values()) {
      for (const w of state.waiters.splice(0)) w.reject(closedError);
    }
    const busy = [...this.busy];
    await Promise.all(busy.map((id) => this.engine.remove(id).catch(() => {})));
    // Starts and resets in flight end in discard() now that the pool is closed.
    while (this.pending.size > 0) await Promise.all([...this.pending]);
    for (const state of this.keys.values()) for (const w of state.idle.splice(0)) this.discard(w);
    while (this.pending.size > 0) await Promise.all([...this.pending]);
    this.keys.clear();
  }

  private async oomKills(id: string, spec: ContainerSpec, tools: WatchdogTools): Promise<number> {
    try {
      const { stream } = await this.engine.exec(id, {
        cmd: [
          ...tools.sh,
          '-c',
          `${tools.bb} cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null`,
        ],
        user: spec.user,
        workingDir: '/',
        env: [],
      });
      const demux = new OutputDemuxer(4096, () => {});
      stream.on('error', () => {});
      stream.on('data', (chunk: Buffer) => demux.push(chunk));
      await new Promise<void>((resolve) => {
        stream.once('end', resolve);
        stream.once('close', resolve);
        stream.end();
      });
      const match = /oom_kill (\d+)/.exec(demux.stdout());
      return match === null ? 0 : Number(match[1]);
    } catch {
      return 0;
    }
  }

  private async startWarm(state: KeyState, timeoutMs: number): Promise<Warm> {
    const { spec, tools } = state;
    // Long enough for at least this call, whatever its timeout.
    const lifeMs = Math.max(this.lifeMs, timeoutMs + WATCHDOG_GRACE_MS + LIFE_MARGIN_MS);
    const ids = /^(\d+):(\d+)$/.exec(spec.user);
    if (ids === null)
      throw new CapsuleError('RUNNER_FAILED', `the call user "${spec.user}" is not numeric uid:gid`);
    const [, uid = '', gid = ''] = ids;
    const separate = !this.keepaliveAsCallUser;
    // Every applet PID 1 runs as root by an absolute path (capsule's images have /bin/busybox; any other
    // image gets capsule's read-only copy): never a PATH lookup that a writable mount could answer.
    const bb = tools.bb === '' ? '/bin/busybox' : tools.bb;
    const owner = separate ? '' : `,uid=${uid},gid=${gid}`;
    const id = await this.engine.createContainer({
      ...spec,
      // Whole seconds: the keep-alive counts its deadline with shell arithmetic.
      entrypoint: [
        ...tools.sh,
        '-c',
        ...(this.keepaliveDumpable
          ? [KEEPALIVE_SCRIPT, 'capsule-keepalive']
          : [KEEPER_PRELUDE, 'capsule-keeper', bb, KEEPALIVE_SCRIPT]),
        String(Math.ceil(lifeMs / 1000)),
        bb,
        uid,
        gid,
        separate ? '1' : '0',
        WIPE_SCRIPT,
      ],
      // The capability's command: what the keep-alive runs for each call, as the call user.
      cmd: spec.cmd,
      user: separate ? KEEPALIVE_USER : spec.user,
      // Only what PID 1 needs: a capability the manifest adds was never a call's (a non-root process loses
      // it at execve), and PID 1 has no use for it.
      capAdd: separate ? [...KEEPALIVE_CAPS] : spec.capAdd,
      ...(this.keepaliveDumpable
        ? {}
        : {
            memoryBytes: spec.memoryBytes + KEEPER_BYTES,
            memorySwapBytes: spec.memorySwapBytes + KEEPER_BYTES,
          }),
      tmpfs: {
        ...spec.tmpfs,
        [KEEPALIVE_DIR]: `rw,noexec,nosuid,nodev,size=64k,mode=0700${owner}`,
        [KEEPER_DIR]: `rw,exec,nosuid,nodev,size=${KEEPER_BYTES},mode=0700${owner}`,
      },
      openStdin: true,
      labels: { ...spec.labels, [ROLE_LABEL]: 'warm' },
      // A SysV shm segment goes away with its last user instead of outliving the call that made it.
      sysctls: { ...spec.sysctls, 'kernel.shm_rmid_forced': '1' },
    });
    let stdin: Duplex | undefined;
    try {
      stdin = await this.engine.attach(id);
      stdin.on('error', () => {});
      await this.engine.start(id);
    } catch (err) {
      stdin?.destroy();
      await this.engine.remove(id).catch(() => {});
      throw new CapsuleError(
        'RUNNER_FAILED',
        `the warm container could not start: ${engineMessage(err)}`,
        {
          hint: 'check the image and the engine (docker info); the keep-alive is busybox sh, from the image or mounted in by capsule',
        },
        { cause: err },
      );
    }
    const warm: Warm = {
      id,
      initPid: 0,
      uses: 0,
      startedAt: performance.now(),
      lifeMs,
      stdin,
      output: new OutputDemuxer(KEEPALIVE_OUTPUT_BYTES, () => {
        warm.dead = true;
      }),
      dead: false,
    };
    const gone = (): void => {
      warm.dead = true;
    };
    stdin.once('end', gone);
    stdin.once('close', gone);
    const frames = new FrameSplitter();
    stdin.on('data', (chunk: Buffer) =>
      frames.push(chunk, (type, payload) => {
        if (warm.sink !== undefined) warm.sink(type, payload);
        else warm.output.push(frame(type, payload));
      }),
    );
    if (this.closed) {
      this.discard(warm);
      throw new CapsuleError('RUNNER_UNAVAILABLE', 'the docker runner was closed');
    }
    // Once the keep-alive says it is set up (nothing of its own is running then, and no call has run yet),
    // its only process is PID 1. Then the first check, before any call: a container whose calls would not
    // get the bare call user (an engine that ignored the user, the capabilities or no-new-privileges) is
    // never used.
    let failure: string | undefined;
    try {
      if (!(await this.outputUntil(warm, (out) => lineCount(out, 'capsule-keepalive-ready') > 0)))
        failure = 'the keep-alive did not start';
      else {
        const pids = await this.engine.processes(id);
        if (pids.length !== 1 || pids[0] === undefined) failure = `${pids.length} processes at start`;
        else {
          warm.initPid = pids[0];
          if (!(await this.verify(warm, true))) failure = 'it failed its first check';
        }
      }
    } catch (err) {
      failure = engineMessage(err);
    }
    if (failure !== undefined) {
      this.discard(warm);
      const said = warm.output.stdout().replace('capsule-keepalive-ready', '').trim();
      throw new CapsuleError(
        'RUNNER_FAILED',
        `the warm container could not be used: ${failure}${said === '' ? '' : ` (${said})`}`,
        {
          hint: 'the engine must honour User, CapDrop/CapAdd and no-new-privileges for reset-reusable containers (docker info); docker.reusable: false runs each call in a fresh container',
        },
      );
    }
    return warm;
  }
}
