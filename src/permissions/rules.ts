import { CapsuleError } from '../errors.js';
import type { Trust } from './ceiling.js';
import { canonicalOptions } from './command-semantics.js';
import { hasGlobMeta, type GlobCache } from './glob.js';
import { RUN_COMMAND } from './keys.js';
import type { PermissionRequest } from './types.js';
import { RULE_SYNTAX } from './key-syntax.js';

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

export function parseRule(text: string, origin: string, trust: Trust = 'persistent'): Rule {
  const m = RULE_SYNTAX.exec(text.trim());
  if (m === null || m[1] === undefined) {
    throw new CapsuleError('CONFIG_INVALID', `Rule "${text}" (from ${origin}) must be Tool or Tool(glob).`, {
      field: 'permissions',
      hint: 'Examples: run_command(git *), write_file(src/**), run_capability.',
    });
  }
  return { text, tool: m[1], pattern: m[2], origin, trust };
}

/** Union of every source (deny(user ∪ agent) is asked before allow(user ∪ agent): a deny anywhere wins). */
export function buildRuleSet(sources: readonly RuleSource[]): RuleSet {
  const allow: Rule[] = [];
  const deny: Rule[] = [];
  for (const src of sources) {
    const trust = src.trust ?? 'persistent';
    for (const r of src.allow ?? []) allow.push(parseRule(r, src.origin, trust));
    for (const r of src.deny ?? []) deny.push(parseRule(r, src.origin, trust));
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

/**
 * Deny rules are broad on purpose: the whole subject, any simple command inside a compound one, and —
 * for run_command — every program the command runs as the parser sees it (wrappers unwrapped, paths
 * and quotes resolved, nested `sh -c` code parsed). A command whose program (or, for a program the rule
 * names, an argument) is not static cannot be proven outside the rule, so it matches.
 */
export function denyRuleMatches(rule: Rule, request: PermissionRequest, globs: GlobCache): boolean {
  if (rule.tool !== request.tool && rule.tool !== request.key.tool) return false;
  if (rule.pattern === undefined) return true;
  const re = globs.rule(rule.pattern);
  if (re.test(request.subject) || (request.parts ?? []).some((p) => re.test(p))) return true;
  if (request.key.tool !== RUN_COMMAND) return false;
  const facts = request.commands;
  if (facts === undefined || facts.unprovable.length > 0) return true;
  // A rule naming a path (`/bin/rm *`) also means the program by name (`rm *`), as commands are matched.
  const word = rulePatternProgram(rule.pattern);
  const slash = word.lastIndexOf('/');
  const byName = slash < 0 ? rule.pattern : rule.pattern.slice(slash + 1);
  const patterns = [re, globs.rule(byName)];
  // The rule with its options in canonical order too (`rm -rf *` also as `rm -f -r *`).
  const canonical = canonicalOptions(byName.split(' '));
  if (canonical !== undefined) patterns.push(globs.rule(canonical));
  const program = globs.rule(rulePatternProgram(byName));
  return facts.commands.some(
    (c) => c.texts.some((t) => patterns.some((p) => p.test(t))) || (c.dynamic && program.test(c.name)),
  );
}
