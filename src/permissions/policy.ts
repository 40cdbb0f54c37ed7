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

/**
 * The decision procedure, pure (it reads the state and the clock inside the session allowlist):
 *   self-protection → deny rules & Deny entries (any source) → ceiling of project entries → allow rules
 *   → mode → project allowlist (content hash) → session allowlist → ask.
 * Throws CEILING_VIOLATION for a project entry that would allow an unsandboxed call, whatever its hash
 * and whatever the mode. Allows from persistent sources (project rules, a file's mode) apply only to
 * sandboxed calls; for the rest they are skipped (listed in `ignored`) and the call goes on to be asked.
 */
export function decide(state: PolicyState, request: PermissionRequest): Verdict {
  const trace: TraceStep[] = [];
  let unproven: Unproven | undefined;
  const verdict = decideSteps(state, request, trace, (u) => (unproven = u));
  if (unproven === undefined || verdict.outcome === 'deny') return verdict;
  // Nothing but a person lets through what may break a deny rule: an allow becomes a question.
  const { rule, origin, why } = unproven;
  const doubt = `capsule cannot prove it stays clear of the deny rule ${rule} (${origin}): ${why}`;
  const reason = `${request.key.raw} needs a person's approval: ${doubt}.`;
  trace.push({ step: 'ask', matched: true, detail: reason });
  const note = verdict.outcome === 'ask' && verdict.note !== undefined ? `${doubt}; ${verdict.note}` : doubt;
  return {
    outcome: 'ask',
    source: 'ask',
    reason,
    ceiling: ceilingFor(request),
    options: ['Once', 'Deny'],
    note,
    unproven,
    ignored: verdict.outcome === 'ask' ? verdict.ignored : [],
    trace,
  };
}

function decideSteps(
  state: PolicyState,
  request: PermissionRequest,
  trace: TraceStep[],
  setUnproven: (u: Unproven) => void,
): Verdict {
  const key = request.key.raw;
  const done = (
    outcome: 'allow' | 'deny',
    source: PolicyStep,
    reason: string,
    matched?: string,
    sessionEntry?: SessionEntry,
  ): Verdict => {
    trace.push({ step: source, matched: true, detail: reason });
    return { outcome, source, reason, matched, sessionEntry, trace };
  };

  if (
    (request.key.tool === WRITE_FILE || request.kind === 'FILE_EDIT') &&
    state.protectedTarget !== undefined
  ) {
    const hit = state.protectedTarget(request.subject);
    if (hit !== undefined) {
      return done(
        'deny',
        'self-protection',
        `${key} is refused: ${hit} belongs to capsule itself (config, allowlist, audit log, profiles). ` +
          'Only a human changes it, by hand or through the capsule CLI.',
        hit,
      );
    }
  }

  let doubt: Unproven | undefined;
  for (const rule of state.rules.deny) {
    const judged = judgeDenyRule(rule, request, state.globs);
    if (judged.match === 'yes') {
      return done(
        'deny',
        'deny-rule',
        `${key} is denied by the rule ${rule.text} (${rule.origin}).`,
        rule.text,
      );
    }
    if (judged.match === 'maybe') doubt ??= { rule: rule.text, origin: rule.origin, why: judged.why };
  }
  if (doubt !== undefined) setUnproven(doubt);
  trace.push({
    step: 'deny-rule',
    matched: false,
    detail:
      doubt === undefined
        ? `${state.rules.deny.length} deny rule(s), none matched`
        : `not proven clear of ${doubt.rule} (${doubt.origin}): ${doubt.why}`,
  });

  const entries = findProjectEntries(state.project, request);
  const denyEntry = entries.find((e) => e.level === 'Deny');
  if (denyEntry !== undefined) {
    return done(
      'deny',
      'allowlist-deny',
      `${key} is denied by the allowlist entry "${denyEntry.key}": "Deny" in ${state.project.file}.`,
      denyEntry.key,
    );
  }

  // The ceiling comes before anything that can allow: a stale hash, a trusted rule or the mode must not
  // hide a hand-edited entry that grants host code for the whole project.
  const ceiling = ceilingFor(request);
  const violating = entries.find((e) => e.level === 'AlwaysThisProject');
  if (violating !== undefined && ceiling.ceiling !== 'project') {
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

  const ignored: string[] = [];
  const skip = (what: string): void => {
    ignored.push(what);
    trace.push({
      step: what.startsWith('mode') ? 'mode' : 'allow-rule',
      matched: false,
      detail: `${what} does not apply: ${key} is not sandboxed (${ceiling.reason}), and a project file cannot allow host code`,
    });
  };

  for (const rule of state.rules.allow) {
    if (!allowRuleMatches(rule, request, state.globs)) continue;
    if (!mayAllow(rule, ceiling)) {
      skip(`the allow rule ${rule.text} (${rule.origin})`);
      continue;
    }
    return done(
      'allow',
      'allow-rule',
      `${key} is allowed by the rule ${rule.text} (${rule.origin}).`,
      rule.text,
    );
  }
  trace.push({
    step: 'allow-rule',
    matched: false,
    detail: `${state.rules.allow.length} allow rule(s), none applied`,
  });

  const mode = state.mode;
  const modeApplies = mayAllow(state.modeSource, ceiling);
  if (request.kind === 'READ_ONLY') return done('allow', 'mode', `${mode} mode allows read-only tools.`);
  if (mode === 'plan') return done('deny', 'mode', planModeReason(request));
  if (mode === 'bypass' || (mode === 'edit' && request.kind === 'FILE_EDIT')) {
    if (modeApplies) {
      return done(
        'allow',
        'mode',
        mode === 'bypass'
          ? 'bypass mode allows everything no deny rule matches.'
          : 'edit mode allows file edits.',
      );
    }
    skip(`mode "${mode}" (${state.modeSource.origin})`);
  } else trace.push({ step: 'mode', matched: false, detail: `${mode} mode asks for ${request.kind} tools` });

  let note: string | undefined;
  for (const entry of entries) {
    if (entry.level !== 'AlwaysThisProject') continue;
    // Here the ceiling is 'project' (checked above): only the content binding is left to check.
    if (entry.contentHash !== undefined && entry.contentHash !== request.contentHash) {
      // Stale: the grant was for other content (code or environment changed). Ask again.
      note = `the project grant "${entry.key}" was for other content (${entry.contentHash}); the capability changed since`;
      trace.push({ step: 'project-allowlist', matched: false, detail: note });
      continue;
    }
    if (entry.contentHash === undefined && request.contentHash !== undefined) {
      // A hand-written capability entry without a hash is bound to nothing: fail closed, ask again.
      note = `the project entry "${entry.key}" has no contentHash, so it is not bound to this capability's content`;
      trace.push({ step: 'project-allowlist', matched: false, detail: note });
      continue;
    }
    return done(
      'allow',
      'project-allowlist',
      `${key} is allowed by "${entry.key}" in ${state.project.file}.`,
      entry.key,
    );
  }
  if (note === undefined)
    trace.push({ step: 'project-allowlist', matched: false, detail: 'no project entry covers it' });

  const found = state.session.find(request);
  if (found.found) {
    return done(
      'allow',
      'session-allowlist',
      `${key} is allowed by the session grant "${found.entry.key}" (${found.entry.origin}).`,
      found.entry.key,
      found.entry,
    );
  }
  trace.push({ step: 'session-allowlist', matched: false, detail: found.reason });
  if (note === undefined && found.reason !== 'no session grant covers this key') note = found.reason;
  if (ignored.length > 0) {
    const why = `${ignored.join(' and ')} ${ignored.length > 1 ? 'do' : 'does'} not apply: it is not sandboxed, and a project file cannot allow host code (--grant or a person can)`;
    note = note === undefined ? why : `${note}; ${why}`;
  }

  const options: AskAnswer[] =
    ceiling.ceiling === 'project'
      ? ['Once', 'AlwaysThisSession', 'AlwaysThisProject', 'Deny']
      : ['Once', 'AlwaysThisSession', 'Deny'];
  const reason = `${key} needs approval.`;
  trace.push({ step: 'ask', matched: true, detail: reason });
  return { outcome: 'ask', source: 'ask', reason, ceiling, options, note, ignored, trace };
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
