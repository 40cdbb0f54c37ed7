import type { AllowlistEntry, PermissionMode } from '../project/project-config.js';
import { CapsuleError } from '../base/errors.js';
import { ceilingFor, mayAllow, type CeilingVerdict, type PolicySource } from './ceiling.js';
import type { GlobCache } from '../base/glob.js';
import { grantCovers, isWildcardGrant, WRITE_FILE } from './keys.js';
import { allowRuleMatches, judgeDenyRule, type RuleSet } from './rules.js';
import type { SessionAllowlist, SessionEntry } from './session-allowlist.js';
import type { AskAnswer, PermissionRequest } from './types.js';

/** The project allowlist indexed for lookup: exact keys in a map, wildcard keys in a list. */
export interface ProjectAllowlist {
  file: string;
  exact: ReadonlyMap<string, AllowlistEntry>;
  wildcard: readonly AllowlistEntry[];
}

export function indexProjectAllowlist(file: string, entries: readonly AllowlistEntry[]): ProjectAllowlist {
  const exact = new Map<string, AllowlistEntry>();
  const wildcard: AllowlistEntry[] = [];
  for (const e of entries) {
    if (isWildcardGrant(e.key)) wildcard.push(e);
    else exact.set(e.key, e);
  }
  return { file, exact, wildcard };
}

/** Everything decide() reads. The engine owns it; decide() itself has no side effects. */
export interface PolicyState {
  mode: PermissionMode;
  /** Who set the mode: a `persistent` bypass/edit (capsule.json, a project profile) allows sandboxed calls only. */
  modeSource: PolicySource;
  rules: RuleSet;
  project: ProjectAllowlist;
  session: SessionAllowlist;
  globs: GlobCache;
  /** Names the protected path a write would hit (capsule.json, the audit log, profiles), or undefined. */
  protectedTarget?: ((subject: string) => string | undefined) | undefined;
}

export type PolicyStep =
  | 'self-protection'
  | 'deny-rule'
  | 'allowlist-deny'
  | 'allow-rule'
  | 'mode'
  | 'project-allowlist'
  | 'session-allowlist'
  | 'ask';

export interface TraceStep {
  step: PolicyStep;
  matched: boolean;
  detail: string;
}

/** The first deny rule a call could not be proven clear of, where it came from, and why. */
export interface Unproven {
  rule: string;
  origin: string;
  why: string;
}

export type Verdict =
  | {
      outcome: 'allow' | 'deny';
      source: PolicyStep;
      reason: string;
      matched?: string | undefined;
      /** The session entry that allowed (the engine counts one use of it). */
      sessionEntry?: SessionEntry | undefined;
      trace: TraceStep[];
    }
  | {
      outcome: 'ask';
      source: 'ask';
      reason: string;
      ceiling: CeilingVerdict;
      /** Answers the prompt may offer: AlwaysThisProject only when the ceiling allows it. */
      options: AskAnswer[];
      /** Why an existing grant did not apply (stale hash, expired), for the prompt. */
      note?: string | undefined;
      /**
       * A deny rule the call cannot be proven clear of: only a person may let it run, once. Grants, allow
       * rules and the mode do not (they are asked past), and no answer makes it stick.
       */
      unproven?: Unproven | undefined;
      /**
       * Allows from project files that matched but do not apply because the call is not sandboxed
       * (`the allow rule run_command(*) (capsule.json)`, `mode "bypass" (capsule.json)`): for warnings.
       */
      ignored: string[];
      trace: TraceStep[];
    };

export function planModeReason(request: PermissionRequest): string {
  return (
    `Plan mode: ${request.key.raw} would change things, so it is denied while planning. ` +
    'Present your plan to the user and call exit_plan_mode to ask for approval; once approved you can make changes.'
  );
}

/** What the steps of one decision share: the call, what the steps before found, and the trace. */
interface Deciding {
  readonly state: PolicyState;
  readonly request: PermissionRequest;
  /** The call's key as written (request.key.raw), for reasons. */
  readonly key: string;
  readonly trace: TraceStep[];
  /** Project allowlist entries covering the call: the exact key first, then wildcards. */
  readonly entries: readonly AllowlistEntry[];
  readonly ceiling: CeilingVerdict;
  /** The first deny rule the call could not be proven clear of. */
  unproven?: Unproven | undefined;
  /** Allows from project files that matched but do not apply: the call is not sandboxed. */
  readonly ignored: string[];
  /** Why an existing grant did not apply (stale hash, expired), for the prompt. */
  note?: string | undefined;
}

/** One step of the procedure: a verdict ends the decision; undefined hands the call to the next step. */
type Step = (d: Deciding) => Verdict | undefined;

/** The decision procedure, in order: the first step with a verdict decides, and if none does, ask(). */
const STEPS: readonly Step[] = [
  selfProtection,
  denyRules,
  allowlistDeny,
  projectCeiling,
  allowRules,
  mode,
  projectAllowlist,
  sessionAllowlist,
];

/**
 * The decision procedure, pure (it reads the state and the clock inside the session allowlist):
 *   self-protection → deny rules & Deny entries (any source) → ceiling of project entries → allow rules
 *   → mode → project allowlist (content hash) → session allowlist → ask.
 * Throws CEILING_VIOLATION for a project entry that would allow an unsandboxed call, whatever its hash
 * and whatever the mode. Allows from persistent sources (project rules, a file's mode) apply only to
 * sandboxed calls; for the rest they are skipped (listed in `ignored`) and the call goes on to be asked.
 */
export function decide(state: PolicyState, request: PermissionRequest): Verdict {
  const d: Deciding = {
    state,
    request,
    key: request.key.raw,
    trace: [],
    entries: findProjectEntries(state.project, request),
    ceiling: ceilingFor(request),
    ignored: [],
  };
  let verdict: Verdict | undefined;
  for (const step of STEPS) {
    verdict = step(d);
    if (verdict !== undefined) break;
  }
  verdict ??= ask(d);
  if (d.unproven === undefined || verdict.outcome === 'deny') return verdict;
  return onlyAPerson(d, d.unproven, verdict);
}

/** A step's verdict that allows or denies, recorded as the trace's last step. */
function settle(
  d: Deciding,
  outcome: 'allow' | 'deny',
  source: PolicyStep,
  reason: string,
  matched?: string,
  sessionEntry?: SessionEntry,
): Verdict {
  d.trace.push({ step: source, matched: true, detail: reason });
  return { outcome, source, reason, matched, sessionEntry, trace: d.trace };
}

/** An allow from a project file that matched but does not apply to a call that is not sandboxed. */
function skip(d: Deciding, what: string): void {
  d.ignored.push(what);
  d.trace.push({
    step: what.startsWith('mode') ? 'mode' : 'allow-rule',
    matched: false,
    detail: `${what} does not apply: ${d.key} is not sandboxed (${d.ceiling.reason}), and a project file cannot allow host code`,
  });
}

/** capsule's own files (config, allowlist, audit log, profiles) are written by a person only. */
function selfProtection(d: Deciding): Verdict | undefined {
  const { state, request } = d;
  if (request.key.tool !== WRITE_FILE && request.kind !== 'FILE_EDIT') return undefined;
  const hit = state.protectedTarget?.(request.subject);
  if (hit === undefined) return undefined;
  return settle(
    d,
    'deny',
    'self-protection',
    `${d.key} is refused: ${hit} belongs to capsule itself (config, allowlist, audit log, profiles). ` +
      'Only a human changes it, by hand or through the capsule CLI.',
    hit,
  );
}

/** A deny rule that matches denies; one the call cannot be proven clear of is kept for a person. */
function denyRules(d: Deciding): Verdict | undefined {
  const { state, request } = d;
  let doubt: Unproven | undefined;
  for (const rule of state.rules.deny) {
    const judged = judgeDenyRule(rule, request, state.globs);
    if (judged.match === 'yes')
      return settle(
        d,
        'deny',
        'deny-rule',
        `${d.key} is denied by the rule ${rule.text} (${rule.origin}).`,
        rule.text,
      );
    if (judged.match === 'maybe') doubt ??= { rule: rule.text, origin: rule.origin, why: judged.why };
  }
  if (doubt !== undefined) d.unproven = doubt;
  d.trace.push({
    step: 'deny-rule',
    matched: false,
    detail:
      doubt === undefined
        ? `${state.rules.deny.length} deny rule(s), none matched`
        : `not proven clear of ${doubt.rule} (${doubt.origin}): ${doubt.why}`,
  });
  return undefined;
}

/** A "Deny" entry in the project allowlist denies, whatever allows the call further on. */
function allowlistDeny(d: Deciding): Verdict | undefined {
  const denyEntry = d.entries.find((e) => e.level === 'Deny');
  if (denyEntry === undefined) return undefined;
  return settle(
    d,
    'deny',
    'allowlist-deny',
    `${d.key} is denied by the allowlist entry "${denyEntry.key}": "Deny" in ${d.state.project.file}.`,
    denyEntry.key,
  );
}

/**
 * The ceiling comes before anything that can allow: a stale hash, a trusted rule or the mode must not
 * hide a hand-edited entry that grants host code for the whole project.
 */
function projectCeiling(d: Deciding): Verdict | undefined {
  const { state, ceiling, key } = d;
  const violating = d.entries.find((e) => e.level === 'AlwaysThisProject');
  if (violating === undefined || ceiling.ceiling === 'project') return undefined;
  throw new CapsuleError(
    'CEILING_VIOLATION',
    `${state.project.file}: the allowlist entry "${violating.key}" grants ${key} for the whole project, ` +
      `but it is not sandboxed (${ceiling.reason}); such keys reach the session allowlist at most.`,
    {
      file: state.project.file,
      field: `allowlist.${violating.key}`,
      key: violating.key,
      hint: `Remove the entry (capsule grants revoke '${violating.key}') and grant it per session with --grant.`,
    },
  );
}

/** The first allow rule that matches and may allow this call (by its source's trust) allows it. */
function allowRules(d: Deciding): Verdict | undefined {
  const { state, request } = d;
  for (const rule of state.rules.allow) {
    if (!allowRuleMatches(rule, request, state.globs)) continue;
    if (!mayAllow(rule, d.ceiling)) {
      skip(d, `the allow rule ${rule.text} (${rule.origin})`);
      continue;
    }
    return settle(
      d,
      'allow',
      'allow-rule',
      `${d.key} is allowed by the rule ${rule.text} (${rule.origin}).`,
      rule.text,
    );
  }
  d.trace.push({
    step: 'allow-rule',
    matched: false,
    detail: `${state.rules.allow.length} allow rule(s), none applied`,
  });
  return undefined;
}

/** Read-only tools are allowed, plan mode denies the rest; bypass and edit allow where they apply. */
function mode(d: Deciding): Verdict | undefined {
  const { state, request } = d;
  const current = state.mode;
  if (request.kind === 'READ_ONLY')
    return settle(d, 'allow', 'mode', `${current} mode allows read-only tools.`);
  if (current === 'plan') return settle(d, 'deny', 'mode', planModeReason(request));
  if (current === 'bypass' || (current === 'edit' && request.kind === 'FILE_EDIT')) {
    if (mayAllow(state.modeSource, d.ceiling)) {
      return settle(
        d,
        'allow',
        'mode',
        current === 'bypass'
          ? 'bypass mode allows everything no deny rule matches.'
          : 'edit mode allows file edits.',
      );
    }
    skip(d, `mode "${current}" (${state.modeSource.origin})`);
  } else
    d.trace.push({ step: 'mode', matched: false, detail: `${current} mode asks for ${request.kind} tools` });
  return undefined;
}

/** A project grant allows when it is bound to this content (the ceiling is 'project' here). */
function projectAllowlist(d: Deciding): Verdict | undefined {
  const { request, trace } = d;
  for (const entry of d.entries) {
    if (entry.level !== 'AlwaysThisProject') continue;
    if (entry.contentHash !== undefined && entry.contentHash !== request.contentHash) {
      // Stale: the grant was for other content (code or environment changed). Ask again.
      d.note = `the project grant "${entry.key}" was for other content (${entry.contentHash}); the capability changed since`;
      trace.push({ step: 'project-allowlist', matched: false, detail: d.note });
      continue;
    }
    if (entry.contentHash === undefined && request.contentHash !== undefined) {
      // A hand-written capability entry without a hash is bound to nothing: fail closed, ask again.
      d.note = `the project entry "${entry.key}" has no contentHash, so it is not bound to this capability's content`;
      trace.push({ step: 'project-allowlist', matched: false, detail: d.note });
      continue;
    }
    return settle(
      d,
      'allow',
      'project-allowlist',
      `${d.key} is allowed by "${entry.key}" in ${d.state.project.file}.`,
      entry.key,
    );
  }
  if (d.note === undefined)
    trace.push({ step: 'project-allowlist', matched: false, detail: 'no project entry covers it' });
  return undefined;
}

/** A session grant (--grant, an answer at a prompt) allows; why none did is kept for the prompt. */
function sessionAllowlist(d: Deciding): Verdict | undefined {
  const found = d.state.session.find(d.request);
  if (found.found) {
    return settle(
      d,
      'allow',
      'session-allowlist',
      `${d.key} is allowed by the session grant "${found.entry.key}" (${found.entry.origin}).`,
      found.entry.key,
      found.entry,
    );
  }
  d.trace.push({ step: 'session-allowlist', matched: false, detail: found.reason });
  if (d.note === undefined && found.reason !== 'no session grant covers this key') d.note = found.reason;
  return undefined;
}

/** Nothing decided: a person is asked, offered the answers the ceiling allows. */
function ask(d: Deciding): Verdict {
  const { ignored, ceiling } = d;
  let note = d.note;
  if (ignored.length > 0) {
    const why = `${ignored.join(' and ')} ${ignored.length > 1 ? 'do' : 'does'} not apply: it is not sandboxed, and a project file cannot allow host code (--grant or a person can)`;
    note = note === undefined ? why : `${note}; ${why}`;
  }
  const options: AskAnswer[] =
    ceiling.ceiling === 'project'
      ? ['Once', 'AlwaysThisSession', 'AlwaysThisProject', 'Deny']
      : ['Once', 'AlwaysThisSession', 'Deny'];
  const reason = `${d.key} needs approval.`;
  d.trace.push({ step: 'ask', matched: true, detail: reason });
  return { outcome: 'ask', source: 'ask', reason, ceiling, options, note, ignored, trace: d.trace };
}

/** Nothing but a person lets through what may break a deny rule: an allow becomes a question, once. */
function onlyAPerson(d: Deciding, unproven: Unproven, verdict: Verdict): Verdict {
  const { rule, origin, why } = unproven;
  const doubt = `capsule cannot prove it stays clear of the deny rule ${rule} (${origin}): ${why}`;
  const reason = `${d.key} needs a person's approval: ${doubt}.`;
  d.trace.push({ step: 'ask', matched: true, detail: reason });
  const note = verdict.outcome === 'ask' && verdict.note !== undefined ? `${doubt}; ${verdict.note}` : doubt;
  return {
    outcome: 'ask',
    source: 'ask',
    reason,
    ceiling: ceilingFor(d.request),
    options: ['Once', 'Deny'],
    note,
    unproven,
    ignored: verdict.outcome === 'ask' ? verdict.ignored : [],
    trace: d.trace,
  };
}

/** Project entries covering the request: the exact key first, then wildcards. */
function findProjectEntries(project: ProjectAllowlist, request: PermissionRequest): AllowlistEntry[] {
  const out: AllowlistEntry[] = [];
  const exact = project.exact.get(request.key.raw);
  if (exact !== undefined) out.push(exact);
  for (const e of project.wildcard) {
    // A Deny wildcard is broad on purpose: `tool:*` Deny also covers compound commands.
    const broadDeny = e.level === 'Deny' && e.key === `${request.key.tool}:*`;
    if (broadDeny || grantCovers(e.key, request.key)) out.push(e);
  }
  return out;
}
