import type { GrantLifetime } from './grant-lifetime.js';
import type { Denial } from './denial.js';

/** What one network request record holds beside the decision (see docs/network.md). */
export interface NetworkAuditFields {
  capability: string;
  host: string;
  port: number;
  method: string;
  /** The address connected to (allowed requests only). */
  address?: string | undefined;
  bytesOut: number;
  bytesIn: number;
}

/** One network request of a run as the egress policy reports it: the decision and the fields logged. */
export interface EgressRecord extends NetworkAuditFields {
  contentHash: string;
  decision: 'allow' | 'deny';
  reason: string;
}

/**
 * Shared vocabulary of the permission engine. Pure types: the engine and the tools both import these.
 */

/** The kind of a tool decides what the mode does with it (docs/permissions.md, the mode × kind table). */
export type ToolKind = 'READ_ONLY' | 'FILE_EDIT' | 'OTHER';

/** A narrow permission key, e.g. `run_command:git`, `run_capability:hello`. */
export interface PermissionKey {
  /** Tool name, e.g. `run_command`. */
  tool: string;
  /** Action part, e.g. `git`; for a compound command the whole normalized command. */
  action: string;
  /** Full key string `tool:action`. */
  raw: string;
  /** True when the key covers a compound command (never matched by prefix or wildcard grants). */
  compound: boolean;
}

/** Every tool call declares None (no check) or Ask(key): the key the gate decides on. */
export type Permission = { type: 'none' } | { type: 'ask'; key: PermissionKey };

/** permission() result: the declared Permission plus what the gate needs to judge it. */
export interface DeclaredPermission {
  permission: Permission;
  subject: string;
  sandboxed: boolean;
  isolation?: string | undefined;
  contentHash?: string | undefined;
  /** run_command: every simple command inside a compound one (deny rules match each part). */
  parts?: readonly string[] | undefined;
}

/** Answers to an Ask. */
export type GrantLevel = 'Once' | 'AlwaysThisSession' | 'AlwaysThisProject';
/**
 * DenyThisSession: denied, and the same key is denied without asking for the rest of the session.
 * DenyAlways: denied, and saved as a deny rule in capsule.json (a deny never widens anything, so it
 * is offered at every ceiling). AllowPattern: allowed, and a rule the person confirmed is saved in
 * capsule.json (sandboxed calls only: an allow from a project file never reaches host code).
 */
export type AskAnswer = GrantLevel | 'Deny' | 'DenyThisSession' | 'DenyAlways' | 'AllowPattern';

/** An answer with what it needs: the lifetime of a session grant, the rule of AllowPattern. */
export interface AskReply {
  answer: AskAnswer;
  /** AlwaysThisSession only: how long the session grant lives (`uses` counts this call). */
  lifetime?: GrantLifetime | undefined;
  /** AllowPattern only: the allow rule the person confirmed, e.g. `run_capability(report-*)`. */
  rule?: string | undefined;
}

/** Everything the gate needs to decide one call. */
export interface PermissionRequest {
  tool: string;
  kind: ToolKind;
  key: PermissionKey;
  /** What rules `Tool(glob)` match against: the command, the path, the capability name. */
  subject: string;
  /**
   * Whether execution is in a real sandbox, judged from the effective configuration at run time
   * (wasm; docker with a hardened profile). False caps the grant at the session allowlist.
   */
  sandboxed: boolean;
  /** Why it is (not) sandboxed, for explain and the prompt. */
  isolation?: string | undefined;
  /** Content hash of the capability the key refers to; project grants are bound to it. */
  contentHash?: string | undefined;
  /** A run asked for by `capsule learn` (recorded as such; decided exactly like any other run). */
  learning?: boolean | undefined;
  /**
   * For a compound command: every simple command inside it (normalized). Deny rules are matched
   * against each part as well as the whole; allow rules never are.
   */
  parts?: readonly string[] | undefined;
  /**
   * run_command: what the command runs, from the real parser (wrappers unwrapped, nested shell code
   * parsed). Deny rules match each program; when absent for a run_command request, nothing can be
   * proven and every run_command deny rule with a pattern matches.
   */
  commands?: CommandFacts | undefined;
}

/** One program a command line may run, as deny rules see it. */
export interface CommandFact {
  /** Program name (last path segment, quotes removed), e.g. `rm` for `/bin/rm` or `'rm'`. */
  name: string;
  /** `name args…`, and `program args…` when the program was written as a path: what rule globs test. */
  texts: readonly string[];
  /** The arguments it gets (null: not static). */
  args: readonly (string | null)[];
  /** Some argument is not static (a variable, a substitution, a glob). */
  dynamic: boolean;
  /** For a `possible` command: the program capsule has no model of, in whose arguments it is. */
  via?: string | undefined;
}

export interface CommandFacts {
  commands: readonly CommandFact[];
  /**
   * Why some program that runs cannot be known. Non-empty: no run_command deny rule with a pattern can
   * be proven not to match, so the call is asked (under --no-prompt: denied), never run unasked.
   */
  unprovable: readonly string[];
  /**
   * Programs that may run, inside the arguments of a program capsule has no model of (`sg root -c
   * 'rm v'`, `setpriv env rm v`): a deny rule matching one makes the call asked, not denied.
   */
  possible?: readonly CommandFact[] | undefined;
  /**
   * Programs capsule has no model of, with their arguments: any tail of the arguments may be a command
   * they run (`setpriv --reuid 0 rm v`). A deny rule judges each tail that starts with a word naming
   * its program.
   */
  opaque?:
    | ReadonlyArray<{
        via: string;
        args: readonly (string | null)[];
        /** When every argument that is not static is a plain glob: their texts (what they can expand to). */
        globs?: readonly string[] | undefined;
      }>
    | undefined;
}

export type DecisionOutcome = 'allow' | 'deny';

export interface Decision {
  outcome: DecisionOutcome;
  /** What decided: `deny-rule`, `allow-rule`, `mode`, `project-allowlist`, `session-allowlist`, `prompt`, `no-prompt`, … */
  source: string;
  /** Human- and agent-readable reason (plan mode tells the agent to present its plan). */
  reason: string;
  key: string;
  /** The rule text or allowlist key that decided, when one did. */
  matched?: string | undefined;
  /** For a denial: what stopped it (a rule, the mode, the ceiling, a person, nobody), as data. */
  denial?: Denial | undefined;
}

/** The gate every mutating tool call passes before `execute()`. */
export interface PermissionGate {
  check(request: PermissionRequest, signal?: AbortSignal): Promise<Decision>;
  /**
   * Record one network request a running capability made through capsule (allowed or refused by its
   * grants.network). The decision was the egress policy's; the gate keeps the log.
   */
  recordNetwork?(record: EgressRecord): Promise<void>;
}
