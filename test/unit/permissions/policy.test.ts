import { describe, expect, it } from 'vitest';
import { makeKey } from '../../../src/permissions/keys.js';
import { PermissionEngine, type PermissionEngineOptions } from '../../../src/permissions/engine.js';
import { createNonInteractivePrompter } from '../../../src/permissions/prompter.js';
import { capabilityRequest, commandReq, HASH_A, HASH_B, tempProject, toolReq } from './helpers.js';

async function engine(config: unknown, extra: Partial<PermissionEngineOptions> = {}) {
  const project = await tempProject(config);
  const logs: string[] = [];
  const e = await PermissionEngine.create({
    projectRoot: project.root,
    prompter: createNonInteractivePrompter(),
    audit: false,
    logger: (m) => logs.push(m),
    ...extra,
  });
  return { e, logs };
}

const entry = (level: string, contentHash?: string) => ({
  level,
  ...(contentHash !== undefined ? { contentHash } : {}),
});

describe('the ceiling is checked whatever the hash and the mode', () => {
  const violating: Array<[string, Record<string, unknown>, ReturnType<typeof commandReq>]> = [
    [
      'run_command:* with a content hash',
      { 'run_command:*': entry('AlwaysThisProject', HASH_B) },
      commandReq('ls'),
    ],
    [
      'run_command:ls with a content hash',
      { 'run_command:ls': entry('AlwaysThisProject', HASH_A) },
      commandReq('ls'),
    ],
    ['run_command:* without a hash', { 'run_command:*': 'AlwaysThisProject' }, commandReq('ls')],
    [
      'a shell capability with a stale hash',
      { 'run_capability:pwn': entry('AlwaysThisProject', HASH_B) },
      capabilityRequest('pwn', { sandboxed: false, hash: HASH_A }),
    ],
    [
      'a shell capability with its own hash',
      { 'run_capability:pwn': entry('AlwaysThisProject', HASH_A) },
      capabilityRequest('pwn', { sandboxed: false, hash: HASH_A }),
    ],
    [
      'run_capability:* over a shell capability',
      { 'run_capability:*': 'AlwaysThisProject' },
      capabilityRequest('pwn', { sandboxed: false }),
    ],
    [
      'write_file:** over a file write',
      { 'write_file:**': 'AlwaysThisProject' },
      toolReq('write_file', 'FILE_EDIT', 'a.txt'),
    ],
  ];
  for (const mode of ['default', 'edit', 'bypass'] as const) {
    for (const [what, allowlist, request] of violating) {
      it(`${what}, --mode ${mode} → CEILING_VIOLATION`, async () => {
        const { e } = await engine({ allowlist }, { mode });
        await expect(e.check(request)).rejects.toMatchObject({ code: 'CEILING_VIOLATION' });
        expect(e.explain(request).outcome).toBe('error');
      });
    }
  }

  it('a Deny rule still wins over a violating entry (nothing runs either way)', async () => {
    const { e } = await engine({
      permissions: { deny: ['run_command(ls)'] },
      allowlist: { 'run_command:*': entry('AlwaysThisProject', HASH_B) },
    });
    expect((await e.check(commandReq('ls'))).outcome).toBe('deny');
  });

  it('a sandboxed capability with a stale hash is asked again (not an error)', async () => {
    const { e } = await engine({ allowlist: { 'run_capability:w': entry('AlwaysThisProject', HASH_B) } });
    expect((await e.check(capabilityRequest('w', { sandboxed: true, hash: HASH_A }))).outcome).toBe('deny');
  });
});

describe('persistent sources allow only sandboxed calls', () => {
  it('capsule.json mode bypass/edit: sandboxed calls allowed, host calls asked (denied with --no-prompt)', async () => {
    const bypass = await engine({ mode: 'bypass' });
    expect((await bypass.e.check(capabilityRequest('w', { sandboxed: true }))).outcome).toBe('allow');
    expect((await bypass.e.check(commandReq('touch'))).outcome).toBe('deny');
    expect((await bypass.e.check(capabilityRequest('s', { sandboxed: false }))).outcome).toBe('deny');
    expect((await bypass.e.check(toolReq('write_file', 'FILE_EDIT', 'a'))).outcome).toBe('deny');
    expect(bypass.logs.join('\n')).toMatch(/mode "bypass".*capsule\.json.*does not apply/);
    const edit = await engine({ mode: 'edit' });
    expect((await edit.e.check(toolReq('write_file', 'FILE_EDIT', 'a'))).outcome).toBe('deny');
    expect(edit.e.explain(toolReq('write_file', 'FILE_EDIT', 'a')).outcome).toBe('ask');
  });

  it('--mode from this process is trusted: bypass allows a host call', async () => {
    const { e } = await engine({}, { mode: 'bypass' });
    expect((await e.check(commandReq('touch'))).outcome).toBe('allow');
  });

  it('setMode from this process overrides a file mode; a persistent setMode does not elevate', async () => {
    const { e } = await engine({ mode: 'bypass' });
    e.setMode('bypass', { trust: 'persistent', origin: 'profile:x' });
    expect(e.explain(commandReq('touch')).outcome).toBe('ask');
    e.setMode('bypass');
    expect(e.explain(commandReq('touch')).outcome).toBe('allow');
  });

  it('capsule.json allow rules: sandboxed calls allowed, host calls asked; the trace says why', async () => {
    const { e, logs } = await engine({
      permissions: { allow: ['run_capability', 'run_command(*)', 'write_file(**)', 'generate_capability'] },
    });
    expect(e.explain(capabilityRequest('w', { sandboxed: true })).outcome).toBe('allow');
    const host = e.explain(commandReq('touch'));
    expect(host.outcome).toBe('ask');
    expect(host.trace.map((t) => t.detail).join('\n')).toMatch(
      /run_command\(\*\).*capsule\.json.*does not apply/,
    );
    expect(e.explain(capabilityRequest('s', { sandboxed: false })).outcome).toBe('ask');
    expect(e.explain(toolReq('write_file', 'FILE_EDIT', 'a')).outcome).toBe('ask');
    const generate = {
      ...toolReq('generate_shell_capability', 'OTHER', 'shell'),
      key: makeKey('generate_capability', 'shell'),
    };
    expect(e.explain(generate).outcome).toBe('ask');
    await e.check(commandReq('touch'));
    expect(logs.join('\n')).toMatch(/run_command\(\*\).*capsule\.json.*does not apply/);
  });

  it('rules of this process (built-in profiles, the embedding program) still allow host calls', async () => {
    const { e } = await engine(
      {},
      { profileRules: [{ origin: 'profile:reviewer', trust: 'process', allow: ['run_command(git *)'] }] },
    );
    expect(e.explain(commandReq('git', 'git status')).outcome).toBe('allow');
    e.setProfileRules([{ origin: 'profile:mine', trust: 'persistent', allow: ['run_command(git *)'] }]);
    expect(e.explain(commandReq('git', 'git status')).outcome).toBe('ask');
  });

  it('persistent deny rules and Deny entries still deny', async () => {
    const { e } = await engine(
      { permissions: { deny: ['run_capability(w)'] }, allowlist: { 'run_command:rm': 'Deny' } },
      { mode: 'bypass' },
    );
    expect((await e.check(capabilityRequest('w', { sandboxed: true }))).outcome).toBe('deny');
    expect((await e.check(commandReq('rm'))).outcome).toBe('deny');
  });
});
