import type { ErrorCode } from '../errors.js';
import { exitStatus } from '../runners/exit-status.js';
import type { RunResult } from '../runners/types.js';

/**
 * capsule's own exit codes (sysexits-style, so they rarely collide with a capability's own).
 * `capsule run` otherwise exits with the capability's exit code.
 */
export const EXIT = {
  OK: 0,
  /** validate found invalid manifests; generic failure. */
  FAILURE: 1,
  USAGE: 64,
  /** Bad data: invalid input document or manifest. */
  DATA: 65,
  NOT_FOUND: 66,
  /** A runner (e.g. the Docker engine) is unavailable. */
  UNAVAILABLE: 69,
  INTERNAL: 70,
  /** Permission denied by the gate (EX_NOPERM; docs/cli.md lists every exit code). */
  DENIED: 77,
  /** capsule.json or a profile is invalid. */
  CONFIG: 78,
  /** The run hit its wall-clock limit (like timeout(1)). */
  TIMEOUT: 124,
  /** The run passed limits.outputBytes, memoryMb or pids and was stopped (128 + SIGKILL, in every runner). */
  LIMIT_KILLED: 137,
  /** The run was canceled (SIGINT). */
  CANCELED: 130,
} as const;

export function exitCodeFor(code: ErrorCode): number {
  switch (code) {
    case 'USAGE':
      return EXIT.USAGE;
    case 'INPUT_INVALID':
    case 'MANIFEST_INVALID':
    case 'PATH_ESCAPE':
      return EXIT.DATA;
    case 'NOT_FOUND':
      return EXIT.NOT_FOUND;
    case 'RUNNER_UNAVAILABLE':
      return EXIT.UNAVAILABLE;
    case 'PERMISSION_DENIED':
    case 'CEILING_VIOLATION':
      return EXIT.DENIED;
    case 'CONFIG_INVALID':
    case 'PROFILE_INVALID':
      return EXIT.CONFIG;
    case 'CANCELED':
      return EXIT.CANCELED;
    default:
      return EXIT.FAILURE;
  }
}

/** The fields of a finished run (a capability's or a command's) that decide capsule's exit code. */
export type RunEnd = Pick<RunResult, 'exitCode' | 'signal' | 'timedOut' | 'canceled' | 'truncated'> &
  Partial<Pick<RunResult, 'oomKilled' | 'pidsLimited' | 'outputInvalid'>>;

/**
 * capsule's exit code for a finished run: the process's own, or the limit that ended it. A limit is
 * judged by its result field, not by how the runner stopped the run (a Wasm guest at its memory cap traps
 * with 134, a shell process on timeout dies of SIGTERM), so one limit gives one code in every runner.
 */
export function runExitCode(result: RunEnd): number {
  if (result.timedOut) return EXIT.TIMEOUT;
  if (result.canceled) return EXIT.CANCELED;
  if (result.truncated || result.oomKilled === true || result.pidsLimited === true) return EXIT.LIMIT_KILLED;
  // The capability exited 0 but its output broke its outputSchema: a failed run.
  if (result.outputInvalid !== undefined && result.exitCode === 0) return EXIT.FAILURE;
  return exitStatus(result.exitCode, result.signal, EXIT.FAILURE);
}
