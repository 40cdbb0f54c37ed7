import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { PlanApproval } from '../agent/agent-session.js';
import type { WriteConfirmer } from '../agent/learn-tool.js';
import { promptSafe, type PromptQuestion, type Prompter } from '../permissions/prompter.js';
import type { PolicyConfirmer } from '../permissions/policy-diff.js';
import type { AskAnswer, AskReply } from '../permissions/types.js';
import { DENIED_BY_TEXT, type Denial } from '../permissions/denial.js';
import { singleQuoted } from '../base/shell-quote.js';

/** A human gets this long to answer an elicitation before it counts as a denial. */
export const ELICITATION_TIMEOUT_MS = 10 * 60_000;

/** Elicitation choices: the engine's answers (but AllowPattern), and session grants with a lifetime. */
type Choice = Exclude<AskAnswer, 'AllowPattern'> | 'Uses' | 'Duration';

const ANSWER_TITLES: Record<Choice, string> = {
  Once: 'Allow once',
  Uses: 'Allow for a number of uses (give "uses")',
  Duration: 'Allow for a time (give "minutes")',
  AlwaysThisSession: 'Allow for this session',
  AlwaysThisProject: 'Allow for this project (saved in capsule.json)',
  Deny: 'Deny',
  DenyThisSession: 'Deny for this session (do not ask again)',
  DenyAlways: 'Deny always (saved as a deny rule in capsule.json)',
};

/** Bounds of a lifetime given over MCP (the same as --grant-for's). */
const MAX_USES = 1000;
const MAX_MINUTES = 30 * 24 * 60;

/**
 * Pure: the choices an elicitation offers for the engine's options. "Always allow a pattern" needs the
 * person to write and confirm a rule, which one form cannot show back: the terminal offers it, MCP not.
 * Where a session grant is possible, it may also be given for a number of uses or a time.
 */
export function elicitationChoices(options: readonly AskAnswer[]): Choice[] {
  const out: Choice[] = [];
  for (const a of options) {
    if (a === 'AllowPattern') continue;
    if (a === 'AlwaysThisSession') out.push('Uses', 'Duration');
    out.push(a);
  }
  return out;
}

/**
 * Pure: the answer an accepted elicitation means. A lifetime choice without a valid number is a
 * denial (fail closed), never a grant for the whole session.
 */
export function replyOfElicitation(
  content: Record<string, unknown> | undefined,
  options: readonly AskAnswer[],
): AskAnswer | AskReply {
  const decision = content?.decision;
  const offered = elicitationChoices(options);
  const chosen = offered.find((c) => c === decision);
  if (chosen === undefined) return 'Deny';
  const whole = (v: unknown, max: number): number | undefined =>
    typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= max ? v : undefined;
  if (chosen === 'Uses') {
    const uses = whole(content?.uses, MAX_USES);
    if (uses === undefined) return 'Deny';
    return uses === 1 ? 'Once' : { answer: 'AlwaysThisSession', lifetime: { uses } };
  }
  if (chosen === 'Duration') {
    const minutes = whole(content?.minutes, MAX_MINUTES);
    if (minutes === undefined) return 'Deny';
    return { answer: 'AlwaysThisSession', lifetime: { ttlMs: minutes * 60_000 } };
  }
  return chosen;
}

/** Whether the connected client declared form elicitation (known after initialize). */
export function clientCanElicit(server: Server): boolean {
  return server.getClientCapabilities()?.elicitation?.form !== undefined;
}

/** Pure: the text of a permission elicitation. */
export function permissionMessage(q: PromptQuestion): string {
  // The key, subject and reasons carry agent- and manifest-controlled text: promptSafe, always.
  const lines = [`capsule: permission needed: ${promptSafe(q.key)}`];
  const action = q.key.slice(q.key.indexOf(':') + 1);
  if (q.request.subject !== action)
    lines.push(`${promptSafe(q.request.tool)}: ${promptSafe(q.request.subject)}`);
  if (q.request.key.compound) lines.push('Compound command: an approval covers this exact command only.');
  if (q.note !== undefined) lines.push(`Note: ${promptSafe(q.note)}.`);
  const reason = promptSafe(q.ceiling.reason);
  lines.push(
    q.ceiling.ceiling === 'project'
      ? `Sandboxed (${reason}).`
      : `Not sandboxed (${reason}): it can be allowed for this session at most.`,
  );
  return lines.join('\n');
}

/**
 * The engine's prompter over MCP: an Ask becomes an elicitation request (Once / this session / this
 * project — only when the ceiling allows — / deny). A client without elicitation cannot be asked:
 * `interactive` is then false and the engine's denial says how to grant the key instead.
 */
export function createElicitationPrompter(server: Server): Prompter {
  return {
    get interactive() {
      return clientCanElicit(server);
    },
    async ask(question, signal) {
      if (!clientCanElicit(server) || signal?.aborted === true) return 'Deny';
      const options = question.options;
      const choices = elicitationChoices(options);
      try {
        const result = await server.elicitInput(
          {
            mode: 'form',
            message: permissionMessage(question),
            requestedSchema: {
              type: 'object',
              properties: {
                decision: {
                  type: 'string',
                  title: `Allow ${promptSafe(question.key, 200)}?`,
                  oneOf: choices.map((a) => ({ const: a, title: ANSWER_TITLES[a] })),
                },
                ...(choices.includes('Uses')
                  ? {
                      uses: {
                        type: 'integer',
                        title: 'Number of uses, this call included (for "a number of uses")',
                        minimum: 1,
                        maximum: MAX_USES,
                      },
                      minutes: {
                        type: 'integer',
                        title: 'Minutes (for "a time")',
                        minimum: 1,
                        maximum: MAX_MINUTES,
                      },
                    }
                  : {}),
              },
              required: ['decision'],
            },
          },
          { signal, timeout: ELICITATION_TIMEOUT_MS },
        );
        if (result.action !== 'accept') return 'Deny';
        return replyOfElicitation(result.content, options);
      } catch {
        // A failed, timed-out or canceled elicitation is a denial, never an allow.
        return 'Deny';
      }
    },
  };
}

/** Characters of a plan shown in an approval request; the rest is cut with a note. */
export const PLAN_MAX_CHARS = 20_000;

/**
 * Pure: the agent's plan as the person reads it. Each line is escaped on its own (line breaks kept,
 * every other control character visible) and marked with "│ " so no line of it can pass for capsule's.
 */
export function planText(plan: string): string {
  const cut = [...plan].length > PLAN_MAX_CHARS ? promptSafe(plan, PLAN_MAX_CHARS) : plan;
  return cut
    .split(/\r\n|\n/)
    .map((line) => `│ ${promptSafe(line, PLAN_MAX_CHARS)}`)
    .join('\n');
}

/** A question with two answers, as a form: `decision` is one of `choices`; `yes` is the answer that acts. */
interface DecisionForm {
  message: string;
  title: string;
  choices: ReadonlyArray<{ const: string; title: string }>;
  yes: string;
  /** More fields after the decision (plan feedback). */
  fields?: Record<string, { type: 'string'; title: string }>;
}

/**
 * The one way capsule's confirmations ask over MCP: the form, within ELICITATION_TIMEOUT_MS. `yes` only for
 * an accepted form with the acting answer; a failure or a timeout throws (each caller decides what that is).
 */
async function elicitDecision(
  server: Server,
  form: DecisionForm,
  signal: AbortSignal | undefined,
): Promise<{ yes: boolean; content: Record<string, unknown> | undefined }> {
  const result = await server.elicitInput(
    {
      mode: 'form',
      message: form.message,
      requestedSchema: {
        type: 'object',
        properties: {
          decision: { type: 'string', title: form.title, oneOf: [...form.choices] },
          ...form.fields,
        },
        required: ['decision'],
      },
    },
    { signal, timeout: ELICITATION_TIMEOUT_MS },
  );
  return {
    yes: result.action === 'accept' && result.content?.decision === form.yes,
    content: result.content,
  };
}

/**
 * A confirmation that fails closed: yes only for an accepted form with the acting answer; a client that
 * cannot elicit, an aborted call, a decline, a failure or a timeout are all no.
 */
async function confirmed(
  server: Server,
  form: DecisionForm,
  signal: AbortSignal | undefined,
): Promise<boolean> {
  if (!clientCanElicit(server) || signal?.aborted === true) return false;
  try {
    return (await elicitDecision(server, form, signal)).yes;
  } catch {
    return false;
  }
}

/**
 * A changed policy (capsule.json rules, allowlist, profiles) confirmed over MCP: the difference is
 * shown and only an explicit "adopt" applies it. No elicitation, a decline, a failure: not adopted.
 */
export function createElicitationPolicyConfirmer(server: Server): PolicyConfirmer {
  return async (change, signal) =>
    confirmed(
      server,
      {
        message: `${change.text}\n\nThe agent asked to reload. Adopt this policy only if you made (or want) these changes yourself.`,
        title: 'Adopt the changed policy?',
        choices: [
          { const: 'keep', title: 'Keep the confirmed policy (ignore the change)' },
          { const: 'adopt', title: 'Adopt the change' },
        ],
        yes: 'adopt',
      },
      signal,
    );
}

/** exit_plan_mode's approval over MCP: the plan is shown and the human approves or rejects it. */
export function createElicitationPlanApproval(server: Server): PlanApproval {
  return async (plan, signal) => {
    if (!clientCanElicit(server)) {
      return {
        approved: false,
        feedback:
          'this MCP client cannot show the plan to a human (it does not support elicitation); present the plan in your reply instead',
      };
    }
    try {
      const answer = await elicitDecision(
        server,
        {
          message: `capsule: the agent asks to leave plan mode with this plan.\n\n${planText(plan)}`,
          title: 'Approve the plan?',
          choices: [
            { const: 'approve', title: 'Approve: switch to edit mode' },
            { const: 'reject', title: 'Reject: keep planning' },
          ],
          yes: 'approve',
          fields: { feedback: { type: 'string', title: 'Feedback for the agent (optional)' } },
        },
        signal,
      );
      const feedback = typeof answer.content?.feedback === 'string' ? answer.content.feedback : undefined;
      return { approved: answer.yes, feedback };
    } catch {
      return { approved: false, feedback: 'the approval request failed or was canceled' };
    }
  };
}

/**
 * Pure: a denial as an agent reads it over MCP. The first line says what stopped the call (a rule,
 * the mode, the ceiling, a person, nobody); the rest says what a person must do, in terms an agent
 * can pass on. An agent cannot restart its own server with a flag, so no line tells it to.
 */
export function agentDenialText(denial: Denial, canElicit: boolean): string {
  const key = denial.key;
  // Always quoted: a person copies it into a client's server configuration.
  const grant = `capsule mcp --grant ${singleQuoted(key)}`;
  const project = denial.ceiling === 'project';
  // The engine's own texts may open with "Permission denied:"; the first line already says so.
  const what = denial.what.replace(/^Permission denied: /, '');
  const lines = [`PERMISSION_DENIED: denied by ${DENIED_BY_TEXT[denial.by]}. ${what}`];
  const retry = 'Retrying the same call will not help.';
  switch (denial.by) {
    case 'rule':
      lines.push(
        `${retry} Only a person can change that rule${denial.matched !== undefined ? ` (${denial.matched})` : ''}: by editing capsule.json or the profile and confirming the change (capsule reload). Do something else, or tell the person why you need ${key}.`,
      );
      break;
    case 'mode':
      lines.push('The mode decides, not a grant: follow what the reason above says.');
      break;
    case 'ceiling':
      lines.push(
        `${key} is not sandboxed, so a project file cannot allow it. What a person must do: ` +
          (canElicit ? 'approve it at the prompt for this session when you call again, or ' : '') +
          `start the server with: ${grant} (this server process only).`,
      );
      break;
    case 'person':
      // A plain no (or a dismissed question) asks again next time; only "deny for this session" does not.
      lines.push(
        denial.source === 'session-deny' || /will not ask again/.test(denial.what)
          ? `${retry} The person refused ${key} for this session: do something else, or explain in your reply why you need it.`
          : `The person declined or dismissed the question. Do not call again unasked: say in your reply why you need ${key}, and call again only if the person agrees.`,
      );
      break;
    case 'nobody':
      lines.push(
        (canElicit
          ? 'The server runs with --no-prompt. '
          : 'This MCP client cannot ask a person (no elicitation). ') +
          `To allow ${key}, a person starts the server with: ${grant}` +
          (project
            ? `, or add a project grant for ${key} in capsule.json (it is sandboxed)`
            : ' (it is not sandboxed: a session grant is the most it can get)') +
          (canElicit ? '.' : ', or use a client with elicitation support.'),
      );
      break;
  }
  return lines.join('\n');
}

/**
 * learn_capability's write over MCP: the proposal and its proof are shown and only an explicit "write"
 * writes. No elicitation, a decline, a timeout, a failure: nothing is written.
 */
export function createElicitationWriteConfirmer(server: Server): WriteConfirmer {
  return async (question, signal) =>
    confirmed(
      server,
      {
        // The proposal carries manifest- and capability-controlled text: each line escaped and marked.
        message: planText(question.text),
        title: `Write ${promptSafe(question.target, 200)}?`,
        choices: [
          { const: 'keep', title: 'Do not write it' },
          { const: 'write', title: 'Write it' },
        ],
        yes: 'write',
      },
      signal,
    );
}
