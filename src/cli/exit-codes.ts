import type { ErrorCode } from '../errors.js';

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
