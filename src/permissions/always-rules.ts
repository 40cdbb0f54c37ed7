/*
 * The rules an "always" answer saves in capsule.json (docs/permissions.md, "Prompting"): "always deny"
 * becomes deny rules for the key, "always allow a pattern" an allow rule the person confirmed. Pure.
 */
import { CapsuleError } from '../base/errors.js';
import { ceilingFor } from './ceiling.js';
import { GlobCache } from '../base/glob.js';
import { RUN_COMMAND } from './keys.js';
import { allowRuleMatches, parseRule } from './rules.js';
import type { PermissionRequest } from './types.js';

/** A rule glob matching exactly `text` (every glob character written as a literal). */
export function literalGlob(text: string): string {
  return text.replace(/[\\*?[\]]/g, (c) => `\\${c}`);
}

/**
 * Pure: the deny rules "always deny" saves for a request. They cover what "deny for this session"
 * covers, the key: every call of that program (`run_command(rm)`, `run_command(rm *)`), that
 * capability, that path (rules judge the subject); for a compound command, the exact command.
 */
export function denyRulesFor(request: PermissionRequest): string[] {
  const tool = request.key.tool;
  if (tool === RUN_COMMAND) {
    if (request.key.compound) return [`${RUN_COMMAND}(${literalGlob(request.subject)})`];
    const program = literalGlob(request.key.action);
    return [`${RUN_COMMAND}(${program})`, `${RUN_COMMAND}(${program} *)`];
  }
  return [`${tool}(${literalGlob(request.subject)})`];
}

/** Pure: the allow rule first proposed for "always allow a pattern" (the key as a rule; the person widens it). */
export function proposedAllowRule(request: PermissionRequest): string {
  return `${request.key.tool}(${literalGlob(request.subject)})`;
}

/**
 * Pure: check an allow rule a person typed for "always allow a pattern". It must parse, be able to
 * match, name this call's tool and match this call, and the call must be sandboxed: a rule in a
 * project file never allows host code, so it is not offered (or saved) for one. Throws USAGE saying why.
 */
export function checkAllowPattern(text: string, request: PermissionRequest): string {
  const rule = (() => {
    try {
      return parseRule(text.trim(), 'the prompt', 'persistent', 'allow');
    } catch (err) {
      throw new CapsuleError(
        'USAGE',
        err instanceof Error ? err.message : String(err),
        { hint: `Write Tool(glob), e.g. ${proposedAllowRule(request)}.` },
        { cause: err },
      );
    }
  })();
  const ceiling = ceilingFor(request);
  if (ceiling.ceiling !== 'project')
    throw new CapsuleError(
      'CEILING_VIOLATION',
      `${request.key.raw} is not sandboxed (${ceiling.reason}): a rule in capsule.json cannot allow it.`,
      { key: request.key.raw, hint: 'Allow it for this session instead.' },
    );
  if (rule.tool !== request.key.tool)
    throw new CapsuleError(
      'USAGE',
      `The rule ${rule.text} is for ${rule.tool}, not for ${request.key.tool}, the tool of this call.`,
      { hint: `Write ${request.key.tool}(glob), e.g. ${proposedAllowRule(request)}.` },
    );
  if (!allowRuleMatches(rule, request, new GlobCache()))
    throw new CapsuleError('USAGE', `The rule ${rule.text} does not match this call (${request.subject}).`, {
      hint: `Write a pattern this call matches, e.g. ${proposedAllowRule(request)}.`,
    });
  return rule.text;
}
