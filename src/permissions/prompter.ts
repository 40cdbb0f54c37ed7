import { createInterface } from 'node:readline';
import type { CeilingVerdict } from './ceiling.js';
import { checkAllowPattern, denyRulesFor, proposedAllowRule } from './always-rules.js';
import type { AskAnswer, AskReply, PermissionRequest } from './types.js';

export interface PromptQuestion {
  request: PermissionRequest;
  key: string;
  /** The answers that may be given; AlwaysThisProject is absent when the ceiling forbids it. */
  options: readonly AskAnswer[];
  ceiling: CeilingVerdict;
  /** Why an earlier grant no longer applies, if one existed. */
  note?: string | undefined;
}

/** Characters of one agent- or manifest-controlled field a prompt shows before it cuts with a note. */
export const PROMPT_FIELD_MAX_CHARS = 2000;

// C0 and C1 controls, DEL, line/paragraph separators and bidi overrides: each can redraw or reorder
// what the person reads, so none reaches a prompt raw.
// eslint-disable-next-line no-control-regex
const UNSAFE_CHAR = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/;
const NAMED_ESCAPES: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t', '\x1b': '\\x1b' };

/**
 * Pure: text that did not come from capsule (a command, a capability's name or description, an
 * isolation reason built from a manifest), made safe to show a person: every control character is
 * written visibly (`\n`, `\x1b`, `\u202e`) so it cannot fake a line or hide one, and text longer
 * than `max` characters is cut with a note saying how much was left out.
 */
export function promptSafe(text: string, max = PROMPT_FIELD_MAX_CHARS): string {
  let out = '';
  let used = 0;
  const chars = [...text];
  for (const [i, ch] of chars.entries()) {
    if (used >= max) return `${out} (… ${chars.length - i} more characters)`;
    used += 1;
    if (!UNSAFE_CHAR.test(ch)) {
      out += ch;
      continue;
    }
    const code = ch.codePointAt(0) ?? 0;
    out +=
      NAMED_ESCAPES[ch] ??
      (code <= 0xff
        ? `\\x${code.toString(16).padStart(2, '0')}`
        : `\\u${code.toString(16).padStart(4, '0')}`);
  }
  return out;
}

/** Injected into the engine: who answers an Ask. */
export interface Prompter {
  /** False when no human can be asked: every Ask becomes a denial that says how to allow the key. */
  readonly interactive: boolean;
  /** An answer, or an answer with what it needs (a session grant's lifetime, AllowPattern's rule). */
  ask(question: PromptQuestion, signal?: AbortSignal): Promise<AskAnswer | AskReply>;
}

/** `--no-prompt`, CI, no TTY: every Ask is a denial, immediately. */
export function createNonInteractivePrompter(): Prompter {
  return { interactive: false, ask: () => Promise.resolve('Deny') };
}

/** Answers from a list, in order (then Deny): for tests and scripted sessions. */
export function createScriptedPrompter(
  answers: ReadonlyArray<AskAnswer | AskReply>,
): Prompter & { asked: PromptQuestion[] } {
  const queue = [...answers];
  const asked: PromptQuestion[] = [];
  return {
    interactive: true,
    asked,
    ask(question) {
      asked.push(question);
      return Promise.resolve(queue.shift() ?? 'Deny');
    },
  };
}

export interface TerminalPrompterOptions {
  input: NodeJS.ReadableStream & { isTTY?: boolean | undefined };
  output: NodeJS.WritableStream;
}

const CHOICES: Record<AskAnswer, { letter: string; label: string }> = {
  Once: { letter: 'o', label: 'once' },
  AlwaysThisSession: { letter: 's', label: 'this session' },
  AlwaysThisProject: { letter: 'p', label: 'this project' },
  AllowPattern: { letter: 'r', label: 'always allow a pattern (a rule)' },
  Deny: { letter: 'd', label: 'deny' },
  DenyThisSession: { letter: 'n', label: 'deny for this session' },
  DenyAlways: { letter: 'x', label: 'always deny' },
};

/** Pure: what the prompt shows. */
export function renderQuestion(q: PromptQuestion): string {
  // Everything but capsule's own words is promptSafe: the key, subject and reasons carry agent text.
  const lines = [`capsule: permission needed: ${promptSafe(q.key)}`];
  if (q.request.subject !== q.key.slice(q.key.indexOf(':') + 1))
    lines.push(`  ${promptSafe(q.request.tool)}: ${promptSafe(q.request.subject)}`);
  if (q.request.key.compound) lines.push('  compound command: approved as this exact string only');
  if (q.note !== undefined) lines.push(`  note: ${promptSafe(q.note)}`);
  if (q.ceiling.ceiling === 'session')
    lines.push(
      `  not sandboxed (${promptSafe(q.ceiling.reason)}): session grant at most; a host tool is never allowed "always" (only "always deny" is saved)`,
    );
  else lines.push(`  sandboxed (${promptSafe(q.ceiling.reason)})`);
  const menu = q.options.map((a) => `[${CHOICES[a].letter}] ${CHOICES[a].label}`).join('  ');
  lines.push(`  ${menu}  (default: deny)`);
  return `${lines.join('\n')}\n> `;
}

/** Pure: the answer a typed line means, or undefined when it is not one of the offered options. */
export function parseAnswer(line: string, options: readonly AskAnswer[]): AskAnswer | undefined {
  const t = line.trim().toLowerCase();
  if (t === '') return 'Deny';
  for (const a of options) {
    const c = CHOICES[a];
    if (t === c.letter || t === c.label || t === a.toLowerCase()) return a;
  }
  return undefined;
}

/**
 * The interactive terminal prompt: Once / session / project (only when the ceiling allows) / deny.
 * Without a TTY it never waits: the answer is Deny. End of input and an aborted signal are Deny too.
 */
export function createTerminalPrompter(options: TerminalPrompterOptions): Prompter {
  const interactive = options.input.isTTY === true;
  return {
    interactive,
    async ask(question, signal) {
      if (!interactive || signal?.aborted === true) return 'Deny';
      const lines = readLines(options.input, signal);
      try {
        options.output.write(renderQuestion(question));
        for (let attempt = 0; attempt < 3; attempt++) {
          const line = await lines.next();
          if (line === undefined) return 'Deny';
          const answer = parseAnswer(line, question.options);
          if (answer === 'AllowPattern') return await askPattern(question, lines, options.output);
          if (answer === 'DenyAlways') {
            const rules = denyRulesFor(question.request).map((r) => promptSafe(r));
            options.output.write(`  saving the deny rule(s) ${rules.join(', ')} in capsule.json\n`);
          }
          if (answer !== undefined) return answer;
          options.output.write(
            `  please answer ${question.options.map((a) => CHOICES[a].letter).join('/')}\n> `,
          );
        }
        return 'Deny';
      } finally {
        lines.close();
      }
    },
  };
}

/**
 * "Always allow a pattern": the person writes (or keeps) the rule, sees what it means, and confirms
 * it. A rule that does not fit this call is asked again; no rule, or no "y", is a denial: nothing saved.
 */
async function askPattern(
  question: PromptQuestion,
  lines: { next(): Promise<string | undefined> },
  output: NodeJS.WritableStream,
): Promise<AskAnswer | AskReply> {
  const proposed = proposedAllowRule(question.request);
  for (let attempt = 0; attempt < 3; attempt++) {
    output.write(
      `  the allow rule to save in capsule.json (Enter keeps ${promptSafe(proposed)}; * matches any characters):\n> `,
    );
    const line = await lines.next();
    if (line === undefined) return 'Deny';
    const text = line.trim() === '' ? proposed : line.trim();
    let rule: string;
    try {
      rule = checkAllowPattern(text, question.request);
    } catch (err) {
      output.write(`  ${promptSafe(err instanceof Error ? err.message : String(err))}\n`);
      continue;
    }
    output.write(
      `  save the allow rule ${promptSafe(rule)} in capsule.json? Every sandboxed call it matches then runs without asking, in this and later sessions, whatever its content (host calls are never allowed by it). [y/N] `,
    );
    const yes = await lines.next();
    if (yes !== undefined && /^(y|yes)$/i.test(yes.trim())) return { answer: 'AllowPattern', rule };
    output.write('  not saved: denied\n');
    return 'Deny';
  }
  return 'Deny';
}

/**
 * A yes/no question in the terminal (a policy change to confirm). Only an explicit "y"/"yes" is a
 * yes; no TTY, end of input, an abort or anything else is a no.
 */
export async function askYesNo(
  options: TerminalPrompterOptions,
  question: string,
  signal?: AbortSignal,
): Promise<boolean> {
  if (options.input.isTTY !== true || signal?.aborted === true) return false;
  const lines = readLines(options.input, signal);
  try {
    options.output.write(`${question} [y/N] `);
    const line = await lines.next();
    return line !== undefined && /^(y|yes)$/i.test(line.trim());
  } finally {
    lines.close();
  }
}

/** Lines of the input as they come (queued, so none typed ahead is lost); undefined at end or abort. */
function readLines(
  input: NodeJS.ReadableStream,
  signal: AbortSignal | undefined,
): { next(): Promise<string | undefined>; close(): void } {
  const rl = createInterface({ input, terminal: false });
  const queue: string[] = [];
  let ended = false;
  let waiter: ((line: string | undefined) => void) | undefined;
  const wake = (line: string | undefined): void => {
    const w = waiter;
    waiter = undefined;
    w?.(line);
  };
  const end = (): void => {
    ended = true;
    wake(undefined);
  };
  rl.on('line', (line) => (waiter !== undefined ? wake(line) : queue.push(line)));
  rl.once('close', end);
  signal?.addEventListener('abort', end, { once: true });
  return {
    next() {
      if (queue.length > 0) return Promise.resolve(queue.shift());
      if (ended) return Promise.resolve(undefined);
      return new Promise((resolve) => (waiter = resolve));
    },
    close() {
      signal?.removeEventListener('abort', end);
      rl.close();
    },
  };
}
