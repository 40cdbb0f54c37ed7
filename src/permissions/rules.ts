import { CapsuleError } from '../base/errors.js';
import type { Trust } from './ceiling.js';
import { baseName } from './commands/words.js';
import { canonicalOptions } from './commands/canonical-options.js';
import { hasGlobMeta, matchPathGlob, type GlobCache } from '../base/glob.js';
import { RUN_COMMAND } from './keys.js';
import type { CommandFact, PermissionRequest } from './types.js';
import { RULE_SYNTAX } from '../project/key-syntax.js';
import { ruleNeverMatches } from '../project/never-matches.js';

/** A parsed `Tool` / `Tool(glob)` rule and where it came from. */
export interface Rule {
  text: string;
  tool: string;
  /** undefined for a bare `Tool` rule (any call of the tool). */
  pattern?: string | undefined;
  /** `capsule.json`, `profile:<name>`, `cli` … for explain and the audit log. */
  origin: string;
  /** Who stands behind it: an allow from a `persistent` (project file) rule applies to sandboxed calls only. */
  trust: Trust;
}

export interface RuleSet {
  allow: readonly Rule[];
  deny: readonly Rule[];
}

/** Rules from one source, as plain strings (capsule.json `permissions`, a profile's front matter). */
export interface RuleSource {
  origin: string;
  /**
   * `process` for rules of this process (flags, the embedding program, capsule's built-in profiles);
   * `persistent` for rules read from a project file. Default `persistent`: unknown provenance never elevates.
   */
  trust?: Trust | undefined;
  allow?: readonly string[] | undefined;
  deny?: readonly string[] | undefined;
}

/**
 * Parse one rule. With its `kind` a rule that can never match (never-matches.ts) is refused too, so it
 * is not accepted in silence wherever it was written.
 */
export function parseRule(
  text: string,
  origin: string,
  trust: Trust = 'persistent',
  kind?: 'allow' | 'deny',
): Rule {
  const m = RULE_SYNTAX.exec(text.trim());
  if (m === null || m[1] === undefined) {
    throw new CapsuleError('CONFIG_INVALID', `Rule "${text}" (from ${origin}) must be Tool or Tool(glob).`, {
      field: 'permissions',
      hint: 'Examples: run_command(git *), write_file(src/**), run_capability.',
    });
  }
  const never = kind === undefined ? undefined : ruleNeverMatches(kind, m[1], m[2]);
  if (never !== undefined) {
    throw new CapsuleError(
      'CONFIG_INVALID',
      `The ${kind} rule ${text} (from ${origin}) can never match: ${never.why}.`,
      { field: `permissions.${kind ?? 'allow'}`, hint: never.hint },
    );
  }
  return { text, tool: m[1], pattern: m[2], origin, trust };
}

/** Union of every source (deny(user ∪ agent) is asked before allow(user ∪ agent): a deny anywhere wins). */
export function buildRuleSet(sources: readonly RuleSource[]): RuleSet {
  const allow: Rule[] = [];
  const deny: Rule[] = [];
  for (const src of sources) {
    const trust = src.trust ?? 'persistent';
    for (const r of src.allow ?? []) allow.push(parseRule(r, src.origin, trust, 'allow'));
    for (const r of src.deny ?? []) deny.push(parseRule(r, src.origin, trust, 'deny'));
  }
  return { allow, deny };
}

/** The program word of a run_command pattern: up to the first unescaped blank. */
export function rulePatternProgram(pattern: string): string {
  const m = /^(?:\\[\s\S]|[^\s\\])*/.exec(pattern);
  return m?.[0] ?? pattern;
}

/**
 * Does an allow rule match? A rule names the tool (`run_command`) or the key's tool. For a compound
 * command only a glob-free rule equal to the whole normalized command matches: `run_command(git *)`
 * and a bare `run_command` never allow `git status && rm -rf ~`. A run_command rule names its program
 * literally: `run_command(gi* *)` allows nothing (only `run_command(*)` and a bare `run_command` mean
 * every simple command, and say so).
 */
export function allowRuleMatches(rule: Rule, request: PermissionRequest, globs: GlobCache): boolean {
  if (rule.tool !== request.tool && rule.tool !== request.key.tool) return false;
  if (request.key.compound) {
    return rule.pattern !== undefined && !hasGlobMeta(rule.pattern) && rule.pattern === request.subject;
  }
  if (rule.pattern === undefined) return true;
  if (
    request.key.tool === RUN_COMMAND &&
    rule.pattern !== '*' &&
    hasGlobMeta(rulePatternProgram(rule.pattern))
  )
    return false;
  return globs.rule(rule.pattern).test(request.subject);
}

/** How a deny rule judges a request: it matches, it cannot be proven clear (ask), or it is clear. */
export type DenyJudgement = { match: 'yes' } | { match: 'maybe'; why: string } | { match: 'no' };

/** Tails of an opaque program's arguments judged per rule (each costs the length of the tail). */
const MAX_TAILS = 64;

/**
 * Deny rules are broad on purpose: the whole subject, any simple command inside a compound one, and —
 * for run_command — every program the command runs as the parser sees it (wrappers unwrapped, paths
 * and quotes resolved, nested `sh -c` code parsed). What cannot be proven clear of the rule is `maybe`:
 * a program that is not static, code the parser cannot see (`python3 -c`, an awk `system()`), or a
 * command that may run inside the arguments of a program capsule has no model of (`setpriv rm v`). The
 * gate asks a person for those, naming the rule and why; it never runs them unasked.
 */
export function judgeDenyRule(rule: Rule, request: PermissionRequest, globs: GlobCache): DenyJudgement {
  if (rule.tool !== request.tool && rule.tool !== request.key.tool) return { match: 'no' };
  if (rule.pattern === undefined) return { match: 'yes' };
  const re = globs.rule(rule.pattern);
  if (re.test(request.subject) || (request.parts ?? []).some((p) => re.test(p))) return { match: 'yes' };
  if (request.key.tool !== RUN_COMMAND) return { match: 'no' };
  const facts = request.commands;
  if (facts === undefined) return { match: 'maybe', why: 'the command was not parsed' };
  // A rule naming a path (`/bin/rm *`) also means the program by name (`rm *`), as commands are matched.
  const word = rulePatternProgram(rule.pattern);
  const slash = word.lastIndexOf('/');
  const byName = slash < 0 ? rule.pattern : rule.pattern.slice(slash + 1);
  const patterns = [re, globs.rule(byName)];
  // The rule with its options in canonical order too (`rm -rf *` also as `rm -f -r *`).
  const canonical = canonicalOptions(byName.split(' '));
  if (canonical !== undefined) patterns.push(globs.rule(canonical));
  const program = globs.rule(rulePatternProgram(byName));
  const matches = (c: CommandFact): boolean =>
    c.texts.some((t) => patterns.some((p) => p.test(t))) || (c.dynamic && program.test(c.name));
  if (facts.commands.some(matches)) return { match: 'yes' };
  if (facts.unprovable.length > 0)
    return { match: 'maybe', why: `what it runs cannot be known: ${facts.unprovable[0] as string}` };
  const possible = (facts.possible ?? []).find(matches);
  if (possible !== undefined)
    return {
      match: 'maybe',
      why: `${possible.via ?? 'a program'} is not known to keep its arguments from running: it may run "${possible.texts[0] as string}"`,
    };
  let tails = 0;
  const programWord = rulePatternProgram(byName).replace(/\\(.)/g, '$1');
  for (const { via, args, globs } of facts.opaque ?? []) {
    const why = `${via} is not known to keep its arguments from running`;
    // A glob expands to names its text allows: `*.ts` can never be `rm`, `*` can.
    const globsClear =
      globs !== undefined &&
      !hasGlobMeta(rulePatternProgram(byName)) &&
      globs.every((g) => !matchPathGlob(g.slice(g.lastIndexOf('/') + 1), baseName(programWord)));
    for (const [i, a] of args.entries()) {
      if (a === null) {
        if (globsClear) continue;
        return { match: 'maybe', why: `${why}, and one of them is not static` };
      }
      const name = baseName(a);
      if (!program.test(name) && !program.test(a)) continue;
      if (++tails > MAX_TAILS) return { match: 'maybe', why: `${why}: too many of them name ${name}` };
      const rest = args.slice(i + 1) as string[];
      const texts = [[name, ...rest].join(' '), [a, ...rest].join(' ')];
      const sorted = canonicalOptions([name, ...rest]);
      if (sorted !== undefined) texts.push(sorted);
      if (texts.some((t) => patterns.some((p) => p.test(t))))
        return { match: 'maybe', why: `${why}: it may run "${texts[0] as string}"` };
    }
  }
  return { match: 'no' };
}

/** Does a deny rule stop the request (it matches, or cannot be proven not to)? */
export function denyRuleMatches(rule: Rule, request: PermissionRequest, globs: GlobCache): boolean {
  return judgeDenyRule(rule, request, globs).match !== 'no';
}
