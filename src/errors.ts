/**
 * The one error class of capsule. `code` is a stable string that callers branch on;
 * `details` names the file / field / key involved and a hint saying what to do.
 * A CapsuleError is a user-facing error: the CLI prints its message, never a stack trace.
 */
export type ErrorCode =
  | 'USAGE'
  | 'NOT_FOUND'
  | 'MANIFEST_INVALID'
  | 'CONFIG_INVALID'
  | 'PROFILE_INVALID'
  | 'INPUT_INVALID'
  | 'PATH_ESCAPE'
  | 'PERMISSION_DENIED'
  | 'CEILING_VIOLATION'
  | 'RUNNER_UNAVAILABLE'
  | 'RUNNER_FAILED'
  | 'ALREADY_EXISTS'
  | 'AUDIT_BROKEN'
  | 'LOCK_TIMEOUT'
  | 'UNSUPPORTED';

export interface ErrorDetails {
  /** File the problem was found in (absolute or project-relative path). */
  file?: string | undefined;
  /** Dotted path of the offending field inside that file, e.g. `limits.timeoutMs`. */
  field?: string | undefined;
  /** Permission key involved, for denials and ceiling violations. */
  key?: string | undefined;
  /** What the user can do about it. */
  hint?: string | undefined;
  /** The Docker engine (by its configured name) a call ran on, when several can. */
  engine?: string | undefined;
  /** Several problems found at once (e.g. every invalid field of one manifest). */
  issues?: ReadonlyArray<{ file?: string | undefined; field?: string | undefined; message: string }>;
}

export class CapsuleError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetails;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'CapsuleError';
    this.code = code;
    this.details = details;
  }
}

export function isCapsuleError(value: unknown, code?: ErrorCode): value is CapsuleError {
  return value instanceof CapsuleError && (code === undefined || value.code === code);
}
