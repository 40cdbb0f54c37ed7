import { describe, expect, it } from 'vitest';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { deniedByOf } from '../../../src/permissions/denial.js';
import { createNonInteractivePrompter, createScriptedPrompter } from '../../../src/permissions/prompter.js';
import type { Prompter } from '../../../src/permissions/prompter.js';
import { agentDenialText } from '../../../src/mcp/elicitation.js';
import { capabilityRequest, tempProject, toolReq } from './helpers.js';

async function engine(config: unknown, prompter: Prompter, mode?: 'plan') {
  const { root } = await tempProject(config);
  return PermissionEngine.create({ projectRoot: root, prompter, audit: false, mode });
}

const base = { schemaVersion: 1 };

describe('a denial says what stopped it: a rule, the mode, the ceiling, a person, or nobody', () => {
  it('a deny rule → rule (with the rule text)', async () => {
    const e = await engine(
      { ...base, permissions: { deny: ['run_capability(boom)'] } },
      createScriptedPrompter(['Once']),
    );
    const d = await e.check(capabilityRequest('boom', { sandboxed: true }));
    expect(d.outcome).toBe('deny');
    expect(d.denial).toMatchObject({ by: 'rule', source: 'deny-rule', matched: 'run_capability(boom)' });
  });

  it('an allowlist "Deny" entry → rule', async () => {
    const e = await engine(
      { ...base, allowlist: { 'run_capability:boom': 'Deny' } },
      createScriptedPrompter(['Once']),
    );
    const d = await e.check(capabilityRequest('boom', { sandboxed: true }));
    expect(d.denial).toMatchObject({ by: 'rule', source: 'allowlist-deny' });
  });

  it("a write to capsule's own files → rule (self-protection), even with a prompter that would allow", async () => {
    const { root } = await tempProject(base);
    const e = await PermissionEngine.create({
      projectRoot: root,
      prompter: createScriptedPrompter(['AlwaysThisSession']),
      audit: false,
    });
    const d = await e.check(toolReq('write_file', 'FILE_EDIT', `${root}/capsule.json`));
    expect(d.denial).toMatchObject({ by: 'rule', source: 'self-protection' });
  });

  it('plan mode → mode', async () => {
    const e = await engine(base, createScriptedPrompter(['Once']), 'plan');
    const d = await e.check(capabilityRequest('x', { sandboxed: true }));
    expect(d.denial).toMatchObject({ by: 'mode', source: 'mode' });
  });

  it('a person answering Deny → person; "deny for this session" → person, and not asked again', async () => {
    const p = createScriptedPrompter(['Deny', 'DenyThisSession', 'Once']);
    const e = await engine(base, p);
    expect((await e.check(capabilityRequest('a', { sandboxed: true }))).denial).toMatchObject({
      by: 'person',
      source: 'prompt',
    });
    expect((await e.check(capabilityRequest('b', { sandboxed: true }))).denial?.by).toBe('person');
    const again = await e.check(capabilityRequest('b', { sandboxed: true }));
    expect(again.denial).toMatchObject({ by: 'person', source: 'session-deny' });
    expect(p.asked).toHaveLength(2);
  });

  it('no person to ask → nobody; the text names the key and no CLI flag', async () => {
    const e = await engine(base, createNonInteractivePrompter());
    const d = await e.check(capabilityRequest('a', { sandboxed: true }));
    expect(d.denial).toMatchObject({ by: 'nobody', source: 'no-prompt', ceiling: 'project' });
    expect(d.denial?.what).not.toContain('--grant');
  });

  it('a project allow rule that cannot reach host code, and no person → ceiling', async () => {
    const e = await engine(
      { ...base, permissions: { allow: ['run_capability(hostly)'] } },
      createNonInteractivePrompter(),
    );
    const d = await e.check(capabilityRequest('hostly', { sandboxed: false }));
    expect(d.outcome).toBe('deny');
    expect(d.denial).toMatchObject({ by: 'ceiling', source: 'no-prompt', ceiling: 'session' });
    // The same rule applies to a sandboxed capability: allowed, no denial at all.
    const ok = await e.check(capabilityRequest('hostly', { sandboxed: true }));
    expect(ok).toMatchObject({ outcome: 'allow', source: 'allow-rule' });
    expect(ok.denial).toBeUndefined();
  });

  it('the one mapping: unknown sources read as nobody (the strictest)', () => {
    expect(deniedByOf('deny-rule')).toBe('rule');
    expect(deniedByOf('no-prompt', true)).toBe('ceiling');
    expect(deniedByOf('something-new')).toBe('nobody');
  });
});

describe('agentDenialText: what an agent is told over MCP', () => {
  const denial = (
    by: 'rule' | 'mode' | 'ceiling' | 'person' | 'nobody',
    ceiling?: 'project' | 'session',
  ) => ({
    by,
    source: 'x',
    key: "run_command:it's",
    what: 'what happened.',
    ceiling,
  });

  it('names the source first and never says "run again with --grant"', () => {
    for (const by of ['rule', 'mode', 'ceiling', 'person', 'nobody'] as const) {
      const text = agentDenialText(denial(by), false);
      expect(text.split('\n')[0]).toMatch(/^PERMISSION_DENIED: denied by (a |the |nobody)/);
      expect(text).not.toMatch(/run again/);
    }
    expect(agentDenialText(denial('rule'), true)).toContain('denied by a rule');
    expect(agentDenialText(denial('mode'), true)).toContain('denied by the mode');
    expect(agentDenialText(denial('ceiling'), true)).toContain('denied by the ceiling');
    expect(agentDenialText(denial('person'), true)).toContain('denied by a person');
    expect(agentDenialText(denial('nobody'), true)).toContain('no person could be asked');
  });

  it('tells what a person must do: the server flag (quoted for a shell) and, for sandboxed work, capsule.json', () => {
    const nobody = agentDenialText(denial('nobody', 'project'), false);
    expect(nobody).toContain(`capsule mcp --grant 'run_command:it'\\''s'`);
    expect(nobody).toContain('capsule.json');
    expect(agentDenialText(denial('nobody', 'session'), false)).not.toContain('capsule.json');
    expect(agentDenialText(denial('person'), true)).not.toContain('--grant');
  });
});
