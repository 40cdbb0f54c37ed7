import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import {
  checkAllowPattern,
  denyRulesFor,
  literalGlob,
  proposedAllowRule,
} from '../../../src/permissions/always-rules.js';
import { MemoryAuditSink } from '../../../src/permissions/audit/memory-sink.js';
import { createCommandParser } from '../../../src/permissions/commands/parser.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { createScriptedPrompter } from '../../../src/permissions/prompter.js';
import type { AskAnswer, AskReply } from '../../../src/permissions/types.js';
import { matchRuleGlob } from '../../../src/base/glob.js';
import { capabilityRequest, commandReq, fakeClock, tempProject } from './helpers.js';

describe('the rules an "always" answer saves', () => {
  it('a literal glob matches exactly its text', () => {
    for (const text of ['a*b', 'x?[y]', 'back\\slash', 'plain'])
      expect(matchRuleGlob(literalGlob(text), text)).toBe(true);
    expect(matchRuleGlob(literalGlob('a*b'), 'aXb')).toBe(false);
  });

  it('"always deny" covers the key: every call of the program, the exact compound command, the capability', () => {
    expect(denyRulesFor(commandReq('rm', 'rm -rf v'))).toEqual(['run_command(rm)', 'run_command(rm *)']);
    expect(denyRulesFor(commandReq('x', 'a && b*', true))).toEqual(['run_command(a && b\\*)']);
    expect(denyRulesFor(capabilityRequest('hello', { sandboxed: true }))).toEqual(['run_capability(hello)']);
  });

  it('an allow pattern must parse, fit the call and its tool, and the call must be sandboxed', () => {
    const w = capabilityRequest('w1', { sandboxed: true });
    expect(proposedAllowRule(w)).toBe('run_capability(w1)');
    expect(checkAllowPattern(' run_capability(w*) ', w)).toBe('run_capability(w*)');
    expect(checkAllowPattern('run_capability', w)).toBe('run_capability');
    const code = (f: () => unknown): string => {
      try {
        f();
        return 'ok';
      } catch (err) {
        return (err as { code: string }).code;
      }
    };
    expect(code(() => checkAllowPattern('run_capability(z*)', w))).toBe('USAGE');
    expect(code(() => checkAllowPattern('run_command(*)', w))).toBe('USAGE');
    expect(code(() => checkAllowPattern('run_capability(W*)', w))).toBe('USAGE');
    expect(code(() => checkAllowPattern('not a rule(', w))).toBe('USAGE');
    expect(
      code(() => checkAllowPattern('run_capability(w*)', capabilityRequest('w1', { sandboxed: false }))),
    ).toBe('CEILING_VIOLATION');
    expect(code(() => checkAllowPattern('run_command(touch *)', commandReq('touch', 'touch v')))).toBe(
      'CEILING_VIOLATION',
    );
  });
});

async function engine(
  answers: Array<AskAnswer | AskReply>,
  options: { clock?: ReturnType<typeof fakeClock> } = {},
) {
  const project = await tempProject({ schemaVersion: 1 });
  const prompter = createScriptedPrompter(answers);
  const logs: string[] = [];
  const e = await PermissionEngine.create({
    projectRoot: project.root,
    prompter,
    audit: new MemoryAuditSink(),
    logger: (m) => logs.push(m),
    commandParser: await createCommandParser(),
    clock: options.clock,
  });
  const permissions = async () =>
    (JSON.parse(await readFile(project.file, 'utf8')) as { permissions?: object }).permissions ?? {};
  return { e, prompter, logs, permissions };
}

describe('the engine and "always" answers', () => {
  it('"always deny" is in effect at once and saved', async () => {
    const { e, prompter, permissions } = await engine(['DenyAlways']);
    expect((await e.check(commandReq('touch', 'touch v'))).outcome).toBe('deny');
    expect(await permissions()).toEqual({ deny: ['run_command(touch)', 'run_command(touch *)'] });
    expect(await e.check(commandReq('touch', 'touch w'))).toMatchObject({
      outcome: 'deny',
      source: 'deny-rule',
    });
    expect(prompter.asked).toHaveLength(1);
  });

  it('an AllowPattern reply for a host call (a forged prompter) is refused: nothing saved, nothing run', async () => {
    const { e, permissions } = await engine([{ answer: 'AllowPattern', rule: 'run_command(*)' }]);
    await expect(e.check(commandReq('touch', 'touch v'))).rejects.toMatchObject({
      code: 'CEILING_VIOLATION',
    });
    expect(await permissions()).toEqual({});
  });

  it('an AllowPattern reply with a rule that does not fit the call allows it once and saves nothing', async () => {
    const { e, logs, permissions } = await engine([{ answer: 'AllowPattern', rule: 'run_capability(z*)' }]);
    expect((await e.check(capabilityRequest('w1', { sandboxed: true }))).outcome).toBe('allow');
    expect(await permissions()).toEqual({});
    expect(logs.join('\n')).toContain('does not match this call');
    expect(e.explain(capabilityRequest('w1', { sandboxed: true })).outcome).toBe('ask');
  });

  it('a confirmed pattern is saved and allows other sandboxed calls it matches, never unsandboxed ones', async () => {
    const { e, permissions } = await engine([{ answer: 'AllowPattern', rule: 'run_capability(w*)' }]);
    expect((await e.check(capabilityRequest('w1', { sandboxed: true }))).outcome).toBe('allow');
    expect(await permissions()).toEqual({ allow: ['run_capability(w*)'] });
    expect(e.explain(capabilityRequest('w2', { sandboxed: true }))).toMatchObject({
      outcome: 'allow',
      source: 'allow-rule',
    });
    expect(e.explain(capabilityRequest('w3', { sandboxed: false })).outcome).toBe('ask');
    expect(e.explain(capabilityRequest('x1', { sandboxed: true })).outcome).toBe('ask');
  });

  it('a lifetime that is no lifetime (a prompter bug) allows this call only, never the session', async () => {
    for (const lifetime of [{ uses: 0 }, { uses: 2.5 }, { ttlMs: -1 }, { ttlMs: Number.NaN }]) {
      const { e, logs } = await engine([{ answer: 'AlwaysThisSession', lifetime }]);
      const req = capabilityRequest('s', { sandboxed: false });
      expect((await e.check(req)).outcome).toBe('allow');
      expect((await e.check(req)).outcome, JSON.stringify(lifetime)).toBe('deny');
      expect(logs.join('\n')).toContain('allowed once');
    }
  });

  it('a session grant with a lifetime: uses count this call; a time expires by the clock', async () => {
    const uses = await engine([{ answer: 'AlwaysThisSession', lifetime: { uses: 3 } }]);
    const req = capabilityRequest('s', { sandboxed: false });
    for (let i = 0; i < 3; i++) expect((await uses.e.check(req)).outcome).toBe('allow');
    expect((await uses.e.check(req)).outcome).toBe('deny');
    expect(uses.prompter.asked).toHaveLength(2);

    const clock = fakeClock();
    const timed = await engine([{ answer: 'AlwaysThisSession', lifetime: { ttlMs: 60_000 } }], { clock });
    expect((await timed.e.check(req)).outcome).toBe('allow');
    clock.advance(59_999);
    expect((await timed.e.check(req)).outcome).toBe('allow');
    clock.advance(1);
    expect((await timed.e.check(req)).outcome).toBe('deny');
    expect(timed.prompter.asked).toHaveLength(2);
  });
});
