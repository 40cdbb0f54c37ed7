/**
 * The one error class of capsule. `code` is a stable string that callers branch on;
 * `details` names the file / field / key involved and a hint saying what to do.
 * A CapsuleError is a user-facing error: the CLI prints its message, never a stack trace.
 */
/**
 * What stopped a call, in the four words a person and an agent act on (plus "nobody"):
 * - `rule`: a deny rule, an allowlist "Deny" entry or capsule's own self-protection;
 * - `mode`: the permission mode (plan mode denies every change);
 * - `ceiling`: the call is not sandboxed, so a project file's allow (entry, rule, mode) cannot apply;
 * - `person`: a person answered no at the prompt (now or earlier in this session);
 * - `nobody`: it needed a person and none could be asked (`--no-prompt`, no terminal, a client without
 *   elicitation).
 */
export type DeniedBy = 'rule' | 'mode' | 'ceiling' | 'person' | 'nobody';

/**
 * A denial as data (decided in permissions/denial.ts; it travels in an error's details, hence here): every
 * surface (CLI, MCP, telemetry) renders it from this, never by parsing text.
 */
export interface Denial {
  by: DeniedBy;
  /** The engine's step or answer that decided (`deny-rule`, `mode`, `prompt`, `no-prompt`, …). */
  source: string;
  key: string;
  /** The rule text or allowlist key that decided, when one did. */
  matched?: string | undefined;
  /** How far a grant of this key may reach: `project` only for sandboxed calls. */
  ceiling?: 'session' | 'project' | undefined;
  /** What happened, without the surface-specific "how to allow it". */
  what: string;
}

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
  /** The person or a signal stopped the work before it finished (SIGINT, a canceled call). */
  | 'CANCELED'
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
  /** PERMISSION_DENIED: what stopped the call (a rule, the mode, the ceiling, a person), as data. */
  denial?: Denial | undefined;
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
