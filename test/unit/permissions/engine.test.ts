import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { isCapsuleError } from '../../../src/base/errors.js';
import { MemoryAuditSink } from '../../../src/permissions/audit/memory-sink.js';
import { createCommandParser } from '../../../src/permissions/commands/parser.js';
import { PermissionEngine, type PermissionEngineOptions } from '../../../src/permissions/engine.js';
import { createNonInteractivePrompter, createScriptedPrompter } from '../../../src/permissions/prompter.js';
import type { AskAnswer } from '../../../src/permissions/types.js';
import { capabilityRequest, commandReq, fakeClock, HASH_A, HASH_B, tempProject, toolReq } from './helpers.js';

async function engine(
  config: unknown,
  extra: Partial<PermissionEngineOptions> = {},
  answers: AskAnswer[] = [],
) {
  const project = await tempProject(config);
  const prompter = createScriptedPrompter(answers);
  const audit = new MemoryAuditSink();
  const logs: string[] = [];
  const e = await PermissionEngine.create({
    projectRoot: project.root,
    prompter,
    audit,
    logger: (m) => logs.push(m),
    ...extra,
  });
  return { e, prompter, audit, logs, ...project };
}

describe('modes × kinds (docs/permissions.md)', () => {
  const table: Array<[string, 'READ_ONLY' | 'FILE_EDIT' | 'OTHER', 'allow' | 'deny' | 'ask']> = [
    ['default', 'READ_ONLY', 'allow'],
    ['default', 'FILE_EDIT', 'ask'],
    ['default', 'OTHER', 'ask'],
    ['plan', 'READ_ONLY', 'allow'],
    ['plan', 'FILE_EDIT', 'deny'],
    ['plan', 'OTHER', 'deny'],
    ['edit', 'READ_ONLY', 'allow'],
    ['edit', 'FILE_EDIT', 'allow'],
    ['edit', 'OTHER', 'ask'],
    ['bypass', 'READ_ONLY', 'allow'],
    ['bypass', 'FILE_EDIT', 'allow'],
    ['bypass', 'OTHER', 'allow'],
  ];
  // The mode of this process (--mode); a mode from capsule.json allows sandboxed calls only (policy tests).
  it.each(table)('%s mode, %s → %s', async (mode, kind, expected) => {
    const { e } = await engine({}, { mode: mode as PermissionEngineOptions['mode'] });
    const v = e.explain(toolReq(kind === 'FILE_EDIT' ? 'write_file' : 'some_tool', kind, 'src/a.ts'));
    expect(v.outcome).toBe(expected);
  });

  it('plan-mode denials tell the agent to present its plan and call exit_plan_mode', async () => {
    const { e } = await engine({}, { mode: 'plan' });
    const d = await e.check(commandReq('git', 'git status'));
    expect(d).toMatchObject({ outcome: 'deny', source: 'mode' });
    expect(d.reason).toContain('exit_plan_mode');
    expect(d.reason).toContain('plan');
  });

  it('plan mode denies even a key on the session allowlist (mode comes before the allowlists)', async () => {
    const { e } = await engine({}, { mode: 'plan', sessionGrants: ['run_command:git'] });
    expect((await e.check(commandReq('git'))).outcome).toBe('deny');
    e.setMode('default');
    expect((await e.check(commandReq('git'))).outcome).toBe('allow');
  });
});

describe('rules: deny → allow → mode → allowlists → ask', () => {
  it('a deny rule wins over an allow rule, the allowlist and bypass mode', async () => {
    const { e } = await engine(
      { permissions: { deny: ['run_command(git push*)'] } },
      {
        mode: 'bypass',
        sessionGrants: ['run_command:git'],
        profileRules: [{ origin: 'profile:reviewer', trust: 'process', allow: ['run_command(git *)'] }],
      },
    );
    const d = await e.check(commandReq('git', 'git push origin main'));
    expect(d).toMatchObject({ outcome: 'deny', source: 'deny-rule', matched: 'run_command(git push*)' });
    expect((await e.check(commandReq('git', 'git status'))).source).toBe('allow-rule');
  });

  it('deny from a profile wins over allow from capsule.json, and the reverse', async () => {
    const { e } = await engine(
      { permissions: { allow: ['run_command(rm *)'], deny: [] } },
      {
        profileRules: [
          {
            origin: 'profile:reviewer',
            trust: 'process',
            deny: ['run_command(rm *)'],
            allow: ['run_command(git *)'],
          },
        ],
      },
    );
    expect((await e.check(commandReq('rm', 'rm -rf x'))).outcome).toBe('deny');
    const d = await e.check(commandReq('git', 'git diff'));
    expect(d).toMatchObject({ outcome: 'allow', source: 'allow-rule' });
    expect(d.reason).toContain('profile:reviewer');
  });

  it('a glob allow rule never allows a compound command; a deny rule catches any part of one', async () => {
    const { e } = await engine(
      { permissions: { allow: ['run_command(git *)', 'run_command'], deny: ['run_command(rm *)'] } },
      { prompter: createNonInteractivePrompter() },
    );
    const sneaky = {
      ...commandReq('', 'git status && curl x | grep y', true),
      parts: ['git status', 'curl x', 'grep y'],
    };
    expect(await e.check(sneaky)).toMatchObject({ outcome: 'deny', source: 'no-prompt' });
    // `sh` reading code from a pipe could run rm: a deny rule cannot be proven not to match.
    // With no person to ask, that is a denial naming the rule.
    const piped = { ...commandReq('', 'git status && curl x | sh', true) };
    expect(await e.check(piped)).toMatchObject({
      outcome: 'deny',
      source: 'unproven',
      matched: 'run_command(rm *)',
    });
    const hidden = {
      ...commandReq('', 'git log "$(rm -rf ~)"', true),
      parts: ['git log "$(rm -rf ~)"', 'rm -rf ~'],
    };
    expect(await e.check(hidden)).toMatchObject({ outcome: 'deny', source: 'deny-rule' });
  });

  it('facts a caller attaches to a request are ignored: the engine reads the command itself', async () => {
    const { e } = await engine({ permissions: { deny: ['run_command(rm *)'] } }, { mode: 'bypass' });
    const forged = { ...commandReq('env', 'env rm -rf x'), commands: { commands: [], unprovable: [] } };
    expect(await e.check(forged)).toMatchObject({ outcome: 'deny', source: 'deny-rule' });
  });

  it('without a parser a run_command deny rule cannot be proven not to match: a person is asked (fail closed)', async () => {
    const { e, prompter } = await engine({}, { mode: 'bypass' }, ['Deny']);
    e.setProfileRules([{ origin: 'profile:x', deny: ['run_command(rm *)'] }]);
    expect(await e.check(commandReq('ls', 'ls -la'))).toMatchObject({ outcome: 'deny', source: 'prompt' });
    expect(prompter.asked[0]?.note).toContain('run_command(rm *) (profile:x)');
  });

  it('what may break a deny rule is asked past a grant and the mode, and a yes covers one call only', async () => {
    const commandParser = await createCommandParser();
    const { e, prompter } = await engine({}, { mode: 'bypass', commandParser }, [
      'AlwaysThisSession',
      'Deny',
    ]);
    e.setProfileRules([{ origin: 'profile:x', deny: ['run_command(rm *)'] }]);
    e.grantSession('run_command:setpriv', { origin: '--grant' });
    const req = commandReq('setpriv', 'setpriv rm v');
    // Asked although the key is granted and the mode is bypass; only Once and Deny are offered.
    expect(await e.check(req)).toMatchObject({ outcome: 'allow', source: 'prompt' });
    expect(prompter.asked[0]?.options).not.toContain('AlwaysThisSession');
    expect(prompter.asked[0]?.note).toMatch(/setpriv is not known to keep its arguments from running/);
    // "always this session" was taken as this once: the same call is asked again.
    expect(await e.check(req)).toMatchObject({ outcome: 'deny', source: 'prompt' });
    expect(prompter.asked).toHaveLength(2);
  });

  it('a command proven clear of every deny rule runs unasked under the grant', async () => {
    const commandParser = await createCommandParser();
    const { e, prompter } = await engine({}, { commandParser }, []);
    e.setProfileRules([{ origin: 'profile:x', deny: ['run_command(rm *)'] }]);
    e.grantSession('run_command:setpriv', { origin: '--grant' });
    expect(await e.check(commandReq('setpriv', 'setpriv --reuid 0 ls v'))).toMatchObject({
      outcome: 'allow',
      source: 'session-allowlist',
    });
    expect(prompter.asked).toHaveLength(0);
  });

  it('a glob-free rule equal to the whole compound command allows exactly it', async () => {
    const { e } = await engine(
      {},
      {
        profileRules: [{ origin: 'cli', trust: 'process', allow: ['run_command(npm test && npm run lint)'] }],
      },
    );
    expect((await e.check(commandReq('', 'npm test && npm run lint', true))).source).toBe('allow-rule');
  });

  it('a Deny entry in the allowlist denies, also in bypass mode', async () => {
    const { e } = await engine({ allowlist: { 'run_capability:nuke': 'Deny' } }, { mode: 'bypass' });
    const d = await e.check(capabilityRequest('nuke', { sandboxed: true }));
    expect(d).toMatchObject({ outcome: 'deny', source: 'allowlist-deny' });
  });
});

describe('project allowlist, ceiling rule and content-hash binding', () => {
  it('a hash-bound wasm grant allows; lookup is project → session → ask', async () => {
    const { e } = await engine({
      allowlist: { 'run_capability:hello': { level: 'AlwaysThisProject', contentHash: HASH_A } },
    });
    expect(await e.check(capabilityRequest('hello', { sandboxed: true }))).toMatchObject({
      outcome: 'allow',
      source: 'project-allowlist',
    });
  });

  it('hand-edited shell key at project level → CEILING_VIOLATION naming the file and the key', async () => {
    const { e, file, audit } = await engine({ allowlist: { 'run_command:git': 'AlwaysThisProject' } });
    try {
      await e.check(commandReq('git', 'git status'));
      expect.unreachable();
    } catch (err) {
      expect(isCapsuleError(err, 'CEILING_VIOLATION')).toBe(true);
      const ce = err as { message: string; details: { file?: string; key?: string } };
      expect(ce.details.file).toBe(file);
      expect(ce.details.key).toBe('run_command:git');
      expect(ce.message).toContain(file);
    }
    expect(audit.events.at(-1)).toMatchObject({ decision: 'error', key: 'run_command:git' });
  });

  it('a wildcard shell entry at project level is a violation too', async () => {
    const { e } = await engine({ allowlist: { 'run_command:*': 'AlwaysThisProject' } });
    await expect(e.check(commandReq('ls'))).rejects.toMatchObject({ code: 'CEILING_VIOLATION' });
  });

  it('a shell capability with a hand-written project entry → CEILING_VIOLATION', async () => {
    const { e } = await engine({ allowlist: { 'run_capability:sh': 'AlwaysThisProject' } });
    await expect(e.check(capabilityRequest('sh', { sandboxed: false }))).rejects.toMatchObject({
      code: 'CEILING_VIOLATION',
      details: { key: 'run_capability:sh' },
    });
  });

  it('wasm approved for the project, then re-generated as shell under the same name: grant lost (CEILING_VIOLATION until revoked), no project option', async () => {
    const { e, prompter } = await engine({}, {}, ['AlwaysThisProject', 'Deny']);
    expect((await e.check(capabilityRequest('tool', { sandboxed: true, hash: HASH_A }))).outcome).toBe(
      'allow',
    );
    expect(e.projectEntries()).toMatchObject([{ key: 'run_capability:tool', contentHash: HASH_A }]);
    const asShell = capabilityRequest('tool', { sandboxed: false, hash: HASH_B });
    // The project entry now covers an unsandboxed capability: the ceiling is checked whatever the hash.
    await expect(e.check(asShell)).rejects.toMatchObject({ code: 'CEILING_VIOLATION' });
    await e.revokeProject('run_capability:tool');
    expect((await e.check(asShell)).outcome).toBe('deny');
    expect(prompter.asked).toHaveLength(2);
    expect(prompter.asked[1]?.options).not.toContain('AlwaysThisProject');
  });

  it('code changed after approval: the project grant no longer applies (ask again)', async () => {
    const { e, prompter } = await engine(
      { allowlist: { 'run_capability:w': { level: 'AlwaysThisProject', contentHash: HASH_A } } },
      {},
      ['Deny'],
    );
    expect((await e.check(capabilityRequest('w', { sandboxed: true, hash: HASH_A }))).outcome).toBe('allow');
    expect((await e.check(capabilityRequest('w', { sandboxed: true, hash: HASH_B }))).outcome).toBe('deny');
    expect(prompter.asked).toHaveLength(1);
  });

  it('a hand-written capability entry without a hash is bound to nothing: fail closed, ask', async () => {
    const { e } = await engine(
      { allowlist: { 'run_capability:w': 'AlwaysThisProject' } },
      { prompter: createNonInteractivePrompter() },
    );
    const x = e.explain(capabilityRequest('w', { sandboxed: true }));
    expect(x.outcome).toBe('ask');
    expect(x.trace.map((s) => s.detail).join('\n')).toContain('no contentHash');
  });

  it('AlwaysThisProject for a run_command key is refused at grant time (CeilingViolation)', async () => {
    const { e } = await engine({});
    await expect(e.grantProject(commandReq('git'))).rejects.toMatchObject({ code: 'CEILING_VIOLATION' });
  });

  it('a prompter answering project where it was not offered → CEILING_VIOLATION, nothing written', async () => {
    const { e, file } = await engine(undefined, {}, ['AlwaysThisProject']);
    await expect(e.check(commandReq('git'))).rejects.toMatchObject({ code: 'CEILING_VIOLATION' });
    await expect(readFile(file, 'utf8')).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('the prompt offers the project option only under the ceiling', async () => {
    const { e, prompter } = await engine({}, {}, ['Once', 'Once']);
    await e.check(commandReq('git'));
    await e.check(capabilityRequest('w', { sandboxed: true }));
    // "Always deny" at every ceiling (a deny never widens); "always allow a pattern" only where a
    // project grant is possible.
    expect(prompter.asked[0]?.options).toEqual([
      'Once',
      'AlwaysThisSession',
      'Deny',
      'DenyThisSession',
      'DenyAlways',
    ]);
    expect(prompter.asked[1]?.options).toEqual([
      'Once',
      'AlwaysThisSession',
      'AlwaysThisProject',
      'AllowPattern',
      'Deny',
      'DenyThisSession',
      'DenyAlways',
    ]);
  });

  it('an "always this project" answer persists a hash-bound entry; a reload keeps it', async () => {
    const { e, file } = await engine({ roots: ['caps'] }, {}, ['AlwaysThisProject']);
    await e.check(capabilityRequest('w', { sandboxed: true, hash: HASH_A }));
    const saved = JSON.parse(await readFile(file, 'utf8')) as {
      roots: string[];
      allowlist: Record<string, unknown>;
    };
    expect(saved.roots).toEqual(['caps']);
    expect(saved.allowlist['run_capability:w']).toMatchObject({
      level: 'AlwaysThisProject',
      contentHash: HASH_A,
    });
    await e.reload();
    expect((await e.check(capabilityRequest('w', { sandboxed: true, hash: HASH_A }))).source).toBe(
      'project-allowlist',
    );
  });

  it('a failed write of an "always" answer is logged and becomes allow-once', async () => {
    const { e, file, logs } = await engine({}, {}, ['AlwaysThisProject', 'Deny']);
    const { writeFile } = await import('node:fs/promises');
    await writeFile(file, '{ broken');
    const d = await e.check(capabilityRequest('w', { sandboxed: true }));
    expect(d.outcome).toBe('allow');
    expect(d.reason).toContain('once');
    expect(logs.join('\n')).toContain('could not save');
    expect(await readFile(file, 'utf8')).toBe('{ broken');
    expect((await e.check(capabilityRequest('w', { sandboxed: true }))).outcome).toBe('deny');
  });
});

describe('session allowlist: TTL, use counts, hash binding', () => {
  it('a TTL that expires mid-session: allowed before, asked after', async () => {
    const clock = fakeClock();
    const { e, prompter } = await engine({}, { clock }, ['Deny']);
    e.grantSession('run_command:git', { ttlMs: 60_000 });
    expect((await e.check(commandReq('git'))).outcome).toBe('allow');
    clock.advance(59_999);
    expect((await e.check(commandReq('git'))).outcome).toBe('allow');
    clock.advance(1);
    const d = await e.check(commandReq('git'));
    expect(d.outcome).toBe('deny');
    expect(prompter.asked[0]?.note).toContain('expired');
  });

  it('a use count runs out', async () => {
    const { e } = await engine({}, { prompter: createNonInteractivePrompter() });
    e.grantSession('run_capability:w', { uses: 2 });
    const req = capabilityRequest('w', { sandboxed: false });
    expect((await e.check(req)).outcome).toBe('allow');
    expect((await e.check(req)).outcome).toBe('allow');
    expect((await e.check(req)).outcome).toBe('deny');
    expect(e.session.list()).toHaveLength(0);
  });

  it('explain does not consume a use', async () => {
    const { e } = await engine({});
    e.grantSession('run_capability:w', { uses: 1 });
    const req = capabilityRequest('w', { sandboxed: false });
    for (let i = 0; i < 3; i++) expect(e.explain(req).outcome).toBe('allow');
    expect((await e.check(req)).outcome).toBe('allow');
    expect(e.explain(req).outcome).toBe('ask');
  });

  it('an AlwaysThisSession answer is bound to the content hash', async () => {
    const { e, prompter } = await engine({}, {}, ['AlwaysThisSession', 'Deny']);
    expect((await e.check(capabilityRequest('s', { sandboxed: false, hash: HASH_A }))).outcome).toBe('allow');
    expect((await e.check(capabilityRequest('s', { sandboxed: false, hash: HASH_A }))).source).toBe(
      'session-allowlist',
    );
    expect((await e.check(capabilityRequest('s', { sandboxed: false, hash: HASH_B }))).outcome).toBe('deny');
    expect(prompter.asked).toHaveLength(2);
  });

  it('--grant run_command:git and run_command:* never cover a compound command', async () => {
    for (const grant of ['run_command:git', 'run_command:*', 'run_command:git:*']) {
      const { e } = await engine({}, { sessionGrants: [grant], prompter: createNonInteractivePrompter() });
      expect((await e.check(commandReq('git', 'git status'))).outcome).toBe('allow');
      const d = await e.check(commandReq('', 'git status && touch X', true));
      expect(d.outcome).toBe('deny');
      expect(d.reason).toContain("--grant 'run_command:git status && touch X'");
    }
  });

  it('Once is not remembered', async () => {
    const { e, prompter } = await engine({}, {}, ['Once', 'Deny']);
    expect((await e.check(commandReq('git'))).outcome).toBe('allow');
    expect((await e.check(commandReq('git'))).outcome).toBe('deny');
    expect(prompter.asked).toHaveLength(2);
  });

  it('concurrent asks for one key prompt once when the first answer is for the session', async () => {
    const { e, prompter } = await engine({}, {}, ['AlwaysThisSession']);
    const ds = await Promise.all([
      e.check(commandReq('git')),
      e.check(commandReq('git')),
      e.check(commandReq('git')),
    ]);
    expect(ds.map((d) => d.outcome)).toEqual(['allow', 'allow', 'allow']);
    expect(prompter.asked).toHaveLength(1);
  });
});

describe('denial messages and the audit trail', () => {
  it('non-interactive denial names the key and how to allow it', async () => {
    const { e, file } = await engine({}, { prompter: createNonInteractivePrompter() });
    const shell = await e.check(commandReq('git'));
    expect(shell).toMatchObject({ outcome: 'deny', source: 'no-prompt', key: 'run_command:git' });
    expect(shell.reason).toContain('--grant run_command:git');
    expect(shell.reason).toContain('cannot allow it for the project');
    const wasm = await e.check(capabilityRequest('w', { sandboxed: true }));
    expect(wasm.reason).toContain('--grant run_capability:w');
    expect(wasm.reason).toContain(file);
    expect(wasm.reason).toContain(HASH_A);
  });

  it('every decision is audited with its source and the capability hash', async () => {
    const { e, audit } = await engine({ permissions: { allow: [], deny: ['run_command(rm *)'] } }, {}, [
      'Once',
    ]);
    await e.check(commandReq('rm', 'rm -rf x'));
    await e.check(capabilityRequest('w', { sandboxed: true }));
    expect(audit.events).toMatchObject([
      { tool: 'run_command', key: 'run_command:rm', decision: 'deny', source: 'deny-rule', mode: 'default' },
      { tool: 'run_capability', decision: 'allow', source: 'prompt', answer: 'Once', contentHash: HASH_A },
    ]);
  });

  it('writes to capsule.json, the audit log or profiles are refused in every mode', async () => {
    const { e } = await engine({ permissions: { allow: ['write_file'], deny: [] } }, { mode: 'bypass' });
    for (const target of [
      'capsule.json',
      '.capsule/audit.jsonl',
      '.capsule/profiles/build.md',
      'sub/../CAPSULE.JSON',
    ]) {
      const d = await e.check(toolReq('write_file', 'FILE_EDIT', target));
      expect(d).toMatchObject({ outcome: 'deny', source: 'self-protection' });
    }
    expect((await e.check(toolReq('write_file', 'FILE_EDIT', 'src/a.ts'))).outcome).toBe('allow');
  });
});
