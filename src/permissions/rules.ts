import { CapsuleError } from '../errors.js';
import type { Trust } from './ceiling.js';
import { hasGlobMeta, type GlobCache } from './glob.js';
import type { PermissionRequest } from './types.js';

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

const RULE = /^([a-z][a-z0-9_]*)(?:\(([\s\S]*)\))?$/;

export function parseRule(text: string, origin: string, trust: Trust = 'persistent'): Rule {
  const m = RULE.exec(text.trim());
  if (m === null || m[1] === undefined) {
    throw new CapsuleError('CONFIG_INVALID', `Rule "${text}" (from ${origin}) must be Tool or Tool(glob).`, {
      field: 'permissions',
      hint: 'Examples: run_command(git *), write_file(src/**), run_capability.',
    });
  }
  return { text, tool: m[1], pattern: m[2], origin, trust };
}

/** Union of every source (seed 001: deny(user ∪ agent) → allow(user ∪ agent)). */
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

/**
 * Does an allow rule match? A rule names the tool (`run_command`) or the key's tool. For a compound
 * command only a glob-free rule equal to the whole normalized command matches: `run_command(git *)`
 * and a bare `run_command` never allow `git status && rm -rf ~`.
 */
export function allowRuleMatches(rule: Rule, request: PermissionRequest, globs: GlobCache): boolean {
  if (rule.tool !== request.tool && rule.tool !== request.key.tool) return false;
  if (request.key.compound) {
    return rule.pattern !== undefined && !hasGlobMeta(rule.pattern) && rule.pattern === request.subject;
  }
  return rule.pattern === undefined || globs.rule(rule.pattern).test(request.subject);
}

/** Deny rules are broad on purpose: the whole subject or any simple command inside a compound one. */
export function denyRuleMatches(rule: Rule, request: PermissionRequest, globs: GlobCache): boolean {
  if (rule.tool !== request.tool && rule.tool !== request.key.tool) return false;
  if (rule.pattern === undefined) return true;
  const re = globs.rule(rule.pattern);
  return re.test(request.subject) || (request.parts ?? []).some((p) => re.test(p));
}
