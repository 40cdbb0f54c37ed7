import type { Capability, Environment } from '../manifest/types.js';
import type { EgressAudit } from '../network/egress.js';
import type { RunnerPermit } from './permit.js';

/**
 * The one result shape every runner returns. A non-zero exit is data, not an exception:
 * runners throw only when they cannot start the capability at all (a CapsuleError).
 */
export interface RunResult {
  environment: Environment;
  /** Process / guest exit code; null when killed by a signal or never started. */
  exitCode: number | null;
  /** Signal name that ended the process (e.g. `SIGKILL`), or null. */
  signal: string | null;
  stdout: string;
  stderr: string;
  /** The wall-clock limit (`limits.timeoutMs`) was hit and the run was killed. */
  timedOut: boolean;
  /** The caller's AbortSignal fired and the run was killed. */
  canceled: boolean;
  /** stdout or stderr went past `limits.outputBytes`; the run was killed and output cut. */
  truncated: boolean;
  /** The memory limit was hit (container OOM-killed, Wasm memory cap reached). */
  oomKilled: boolean;
  /** The pids limit refused a new process and the run was stopped (set only where it is enforced). */
  pidsLimited?: boolean;
  /** A write to a granted folder was refused at `limits.writeBytes` (the guest got "no space"; set only where enforced). */
  writeLimited?: boolean;
  durationMs: number;
  /** The manifest's outputSchema: stdout parsed as JSON, set only when it matched. */
  output?: unknown;
  /**
   * The manifest's outputSchema did not match stdout (names the field): the run failed, whatever its
   * exit code, and its output must not be passed on as valid.
   */
  outputInvalid?: string | undefined;
  /**
   * Network requests the run's egress policy refused (`METHOD host:port`, in order), set by the executor
   * only when there were any: the capability tried to reach what its grants.network does not name.
   */
  networkDenied?: readonly string[] | undefined;
  /** A learning run (RunRequest.learn): what the run was seen to reach, and what could not be seen. */
  observed?: RunObservations | undefined;
}

/** One thing a learning run was seen to try. */
export interface Observation {
  /** Files: what was done to `path`; `connect`: a socket address; `http`: a request through capsule. */
  op: 'read' | 'list' | 'write' | 'create' | 'rename' | 'remove' | 'exec' | 'connect' | 'http';
  /** Absolute host path (files, unix sockets). */
  path?: string | undefined;
  host?: string | undefined;
  port?: number | undefined;
  method?: string | undefined;
  /** `ok`: it happened; `failed`: the call failed by itself (a missing file); `refused`: the run's limits refused it. */
  outcome: 'ok' | 'failed' | 'refused';
  /** Who saw it: `tracer`, `egress`, … */
  via: string;
}

export interface RunObservations {
  observations: Observation[];
  /** What this runner could not observe (said in the proposal, never guessed). */
  unobserved: string[];
}

export interface RunRequest {
  capability: Capability;
  /** The input document as JSON text: stdin for processes, `run(input)` for components. */
  input: string;
  signal?: AbortSignal | undefined;
  /** Where the run's network requests are recorded (capabilities with grants.network). */
  egressAudit?: EgressAudit | undefined;
  /**
   * Run on this configured engine only (compare across engines). Read by the engine pool, which refuses a
   * name it does not have or an engine that does not answer rather than schedule elsewhere; runners with
   * one place to run ignore it.
   */
  engine?: string | undefined;
  /**
   * The gate judged this call sandboxed (a project-level grant may rest on that). A runner whose isolation is
   * measured where it runs (Runner.measureIsolation) runs it only on a daemon whose current measurement is a
   * sandbox, and refuses it (PERMISSION_DENIED) when the measurement changed to a weaker one since.
   */
  requireSandboxed?: boolean | undefined;
  /**
   * A learning run: the runner records what the run reaches (RunResult.observed), keeping every limit it
   * has (what is not granted stays refused, and is recorded). A runner that cannot observe says so.
   */
  learn?: boolean | undefined;
  /**
   * Told once the call holds what it runs in where it runs (a docker call: its container exists on the engine).
   * An engine pool places the next call only after it (or after the call ends), so that one counts this.
   */
  onPlaced?: (() => void) | undefined;
}

/** One interface per runner; implementations live beside it (shell, wasm, docker). */
export interface Runner {
  readonly environment: Environment;
  /** Whether this runner can run here now (e.g. the Docker engine answers), with a reason when not. */
  available(): Promise<{ ok: true } | { ok: false; reason: string }>;
  /**
   * Runs `request.capability` only with a permit the executor minted for exactly that capability, spent by
   * this run: anything else is refused (PERMISSION_DENIED) before anything starts (src/runners/permit.ts).
   */
  run(request: RunRequest, permit: RunnerPermit): Promise<RunResult>;
  /**
   * A hint that one of this runner's capabilities is about to run (resolved, not yet judged): start
   * what a first call waits for (a Wasm worker) so it overlaps staging and the gate. Runs no
   * capability code and decides nothing; a runner without such a start-up cost leaves it out.
   */
  warm?(count?: number): Promise<void>;

  /**
   * Starts reading and compiling the staged `capability` (a Wasm binary from capsule's verified cache)
   * while its call is still judged, so the run after the permit finds it ready. Runs none of its code,
   * decides nothing and writes nothing: what is not ready by then is done by the run, which checks
   * everything again (its bytes are named by their hash). Errors are the run's to report.
   */
  preload?(capability: Capability): Promise<void>;

  /**
   * Runners whose isolation depends on what is measured where they run (several Docker engines): why their
   * capabilities are not a sandbox there, or undefined when the measurement found nothing missing. The executor
   * asks before each call of this environment is judged: cheap while what was measured still answers (the same
   * daemon, checked without a request), a new measurement otherwise.
   */
  measureIsolation?(): Promise<string | undefined>;
  /** Release pooled workers / containers. Safe to call twice. */
  close(): Promise<void>;
}

/** What a finished process or Wasm guest reports, whichever runner ran it: a RunResult but its environment. */
export type FinishedRun = Pick<
  RunResult,
  | 'exitCode'
  | 'signal'
  | 'stdout'
  | 'stderr'
  | 'timedOut'
  | 'canceled'
  | 'truncated'
  | 'oomKilled'
  | 'durationMs'
  | 'pidsLimited'
  | 'writeLimited'
>;

/**
 * The one way a finished run becomes a RunResult's fields: only those a RunResult has (nothing a runner keeps
 * of its own), each one not given as for a run that never started, and a limit flag only when it was hit (a
 * runner that does not enforce a limit never reports it).
 */
export function finishedRun(done: Partial<FinishedRun> = {}): FinishedRun {
  const fields: FinishedRun = {
    exitCode: done.exitCode ?? null,
    signal: done.signal ?? null,
    stdout: done.stdout ?? '',
    stderr: done.stderr ?? '',
    timedOut: done.timedOut ?? false,
    canceled: done.canceled ?? false,
    truncated: done.truncated ?? false,
    oomKilled: done.oomKilled ?? false,
    durationMs: done.durationMs ?? 0,
  };
  if (done.pidsLimited === true) fields.pidsLimited = true;
  if (done.writeLimited === true) fields.writeLimited = true;
  return fields;
}

/** A run that never started: what a refusal reports, and where a test's result starts. */
export function emptyResult(environment: Environment): RunResult {
  return { environment, ...finishedRun() };
}
