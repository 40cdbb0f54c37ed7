import { CapsuleError, isCapsuleError } from '../base/errors.js';
import { checkAllowPattern, denyRulesFor } from './always-rules.js';
import { denialMessage, denialHead, denialOf } from './denial-text.js';
import type { DecisionFields } from './engine-records.js';
import { lifetimeText } from './grant-lifetime.js';
import type { Verdict } from './policy.js';
import type { Prompter } from './prompter.js';
import type { SessionAllowlist } from './session-allowlist.js';
import type { AskAnswer, AskReply, Decision, PermissionRequest } from './types.js';

// The Ask flow's second half: what a person's answer at a prompt does. A deny may be kept for the session or
// saved as a rule; an allow may become a session grant (with a lifetime), a saved allow rule or a project
// grant. Every answer is recorded before it is returned. The engine asks; this applies.

type AskVerdict = Extract<Verdict, { outcome: 'ask' }>;

/** What of the permission engine an answer acts on. */
export interface AnswerHost {
  /** capsule.json, where saved rules and project grants go. */
  readonly configFile: string;
  readonly session: SessionAllowlist;
  readonly prompter: Prompter;
  logger(message: string): void;
  record(request: PermissionRequest, event: DecisionFields): Promise<void>;
  /** Save rules a person gave in capsule.json and adopt only them. */
  saveRules(additions: { allow?: string[]; deny?: string[] }, by: string): Promise<void>;
  grantProject(request: PermissionRequest): Promise<void>;
  /** Refuse `key` without asking again for the rest of the session. */
  refuseForSession(key: string): void;
}

/**
 * The answers a prompt offers: decide()'s, plus "deny for this session" and "always deny" beside a
 * plain deny (a deny never widens, so it may be saved at every ceiling), and "always allow a pattern"
 * where a project grant is possible (sandboxed calls only).
 */
export function withSessionDeny(options: readonly AskAnswer[]): AskAnswer[] {
  const out = [...options];
  if (out.includes('AlwaysThisProject') && !out.includes('AllowPattern'))
    out.splice(out.indexOf('AlwaysThisProject') + 1, 0, 'AllowPattern');
  if (out.includes('Deny')) {
    if (!out.includes('DenyThisSession')) out.push('DenyThisSession');
    if (!out.includes('DenyAlways')) out.push('DenyAlways');
  }
  return out;
}

/** A prompter's answer in one shape. */
export function replyOf(answer: AskAnswer | AskReply): AskReply {
  return typeof answer === 'string' ? { answer } : answer;
}

/** Apply the person's `reply` to the Ask `verdict` on `request`, whose prompt offered `options`. */
export async function applyAnswer(
  host: AnswerHost,
  request: PermissionRequest,
  verdict: AskVerdict,
  options: readonly AskAnswer[],
  reply: AskReply,
): Promise<Decision> {
  const key = request.key.raw;
  let answer = reply.answer;
  // What may break a deny rule is allowed one call at a time: a wider yes counts as this once.
  if (
    verdict.unproven !== undefined &&
    (answer === 'AlwaysThisSession' || answer === 'AlwaysThisProject' || answer === 'AllowPattern')
  )
    answer = 'Once';
  if (!options.includes(answer)) {
    const err = new CapsuleError(
      'CEILING_VIOLATION',
      `${key} cannot be allowed for the whole project: it is not sandboxed (${verdict.ceiling.reason}).`,
      { key, file: host.configFile, hint: 'Answer "this session" instead.' },
    );
    await host.record(request, { decision: 'error', source: 'prompt', reason: err.message, answer });
    throw err;
  }
  if (answer === 'DenyAlways' || answer === 'DenyThisSession' || answer === 'Deny')
    return refuse(host, request, verdict, answer);
  return allow(host, request, { ...reply, answer });
}

/** A deny answer: always (saved as a rule), for this session, or this once. */
async function refuse(
  host: AnswerHost,
  request: PermissionRequest,
  verdict: AskVerdict,
  answer: 'DenyAlways' | 'DenyThisSession' | 'Deny',
): Promise<Decision> {
  const key = request.key.raw;
  if (answer === 'DenyAlways') {
    host.refuseForSession(key);
    const rules = denyRulesFor(request);
    let saved = `saved as the deny rule(s) ${rules.join(', ')} in ${host.configFile}`;
    try {
      await host.saveRules({ deny: rules }, 'deny rule saved at a prompt');
    } catch (err) {
      // Not saved: still refused for the rest of this session, and said so.
      const why = err instanceof Error ? err.message : String(err);
      host.logger(`could not save the deny rule(s) ${rules.join(', ')} in ${host.configFile}: ${why}`);
      saved = `not saved (${why}); refused for the rest of this session`;
    }
    const reason = `Permission denied: ${key} was refused at the prompt, always: ${saved}.`;
    await host.record(request, { decision: 'deny', source: 'prompt', reason, answer });
    const denial = denialOf(request, 'prompt', reason, { ceiling: verdict.ceiling.ceiling });
    return { outcome: 'deny', source: 'prompt', reason, key, denial };
  }
  if (answer === 'DenyThisSession') {
    host.refuseForSession(key);
    const reason = `Permission denied: ${key} was refused at the prompt for the rest of this session; capsule will not ask again.`;
    await host.record(request, { decision: 'deny', source: 'prompt', reason, answer });
    const denial = denialOf(request, 'prompt', reason, { ceiling: verdict.ceiling.ceiling });
    return { outcome: 'deny', source: 'prompt', reason, key, denial };
  }
  if (verdict.unproven !== undefined && !host.prompter.interactive) {
    const { rule, origin, why } = verdict.unproven;
    const what = `${key} needs a person's approval and no one can be asked (--no-prompt, or no terminal): capsule cannot prove it stays clear of the deny rule ${rule} (${origin}): ${why}.`;
    const reason =
      `Permission denied: ${what} A grant or the mode does not lift this; only a person at a prompt can ` +
      'allow it, once. Run it where a person can answer, or write the command so that what it runs is on the command line.';
    await host.record(request, { decision: 'deny', source: 'unproven', reason, answer, matched: rule });
    const denial = denialOf(request, 'unproven', what, { matched: rule, ceiling: verdict.ceiling.ceiling });
    return { outcome: 'deny', source: 'unproven', reason, key, matched: rule, denial };
  }
  const asked = host.prompter.interactive;
  const source = asked ? 'prompt' : 'no-prompt';
  const reason = denialMessage(request, verdict.ceiling, asked, host.configFile);
  await host.record(request, {
    decision: 'deny',
    source,
    reason,
    answer,
    ceilingSkipped: verdict.ignored.length > 0,
  });
  const denial = denialOf(request, source, denialHead(request, asked, verdict.ignored), {
    ceiling: verdict.ceiling.ceiling,
    ceilingSkipped: verdict.ignored.length > 0,
  });
  return { outcome: 'deny', source, reason, key, denial };
}

/** An allow answer: this once, for the session (maybe with a lifetime), as a saved rule or a project grant. */
async function allow(host: AnswerHost, request: PermissionRequest, reply: AskReply): Promise<Decision> {
  const key = request.key.raw;
  const answer = reply.answer;
  let reason = `${key} allowed at the prompt (${answer}).`;
  if (answer === 'AlwaysThisSession') {
    // A lifetime's uses count this call: "3 uses" leaves two for later calls, "once" none.
    let { uses, ttlMs } = reply.lifetime ?? {};
    const badUses = uses !== undefined && !(Number.isSafeInteger(uses) && uses >= 1);
    const badTtl = ttlMs !== undefined && !(Number.isFinite(ttlMs) && ttlMs > 0);
    if (badUses || badTtl) {
      // A lifetime that is no lifetime never becomes a grant for the whole session: this call only.
      host.logger(
        `the prompt gave ${key} a lifetime that is not one (${JSON.stringify(reply.lifetime)}); allowed once.`,
      );
      uses = 1;
      ttlMs = undefined;
    }
    if (uses !== undefined || ttlMs !== undefined)
      reason = `${key} allowed at the prompt (${answer}, ${lifetimeText({ uses, ttlMs })}).`;
    if (uses === undefined || uses > 1)
      host.session.add(key, {
        contentHash: request.contentHash,
        origin: 'prompt',
        uses: uses === undefined ? undefined : uses - 1,
        ttlMs,
      });
  } else if (answer === 'AllowPattern') {
    try {
      const rule = checkAllowPattern(reply.rule ?? '', request);
      await host.saveRules({ allow: [rule] }, 'allow rule saved at a prompt');
      reason = `${key} allowed at the prompt: the rule ${rule} was saved in ${host.configFile}.`;
    } catch (err) {
      // The person said yes to this call; a rule that cannot be saved allows it once.
      const why = err instanceof Error ? err.message : String(err);
      host.logger(`could not save the allow rule for ${key} in ${host.configFile}: ${why}; allowed once.`);
      reason = `${key} allowed once: saving the allow rule failed (${why}).`;
    }
  } else if (answer === 'AlwaysThisProject') {
    try {
      await host.grantProject(request);
    } catch (err) {
      if (isCapsuleError(err, 'CEILING_VIOLATION')) throw err;
      // A failed persist is not fatal (the human did say yes): log it, allow this once.
      const why = err instanceof Error ? err.message : String(err);
      host.logger(`could not save the project grant for ${key} in ${host.configFile}: ${why}; allowed once.`);
      reason = `${key} allowed once: saving the project grant failed (${why}).`;
    }
  }
  await host.record(request, { decision: 'allow', source: 'prompt', reason, answer });
  return { outcome: 'allow', source: 'prompt', reason, key };
}
