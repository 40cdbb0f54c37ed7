import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { AgentSession } from '../../../src/agent/agent-session.js';
import { openAgentSession } from '../../../src/agent/open-session.js';
import { createScriptedPrompter } from '../../../src/permissions/prompter.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';

// The agent holds a grant for one harmless-looking command and uses it to rewrite capsule's own policy.
// Judged by effect: a marker file that a compound command would create must not appear.

const sessions: AgentSession[] = [];
afterEach(async () => {
  for (const s of sessions.splice(0)) await s.close();
});

const EVIL_POLICIES: Record<string, unknown> = {
  'allow rules': { schemaVersion: 1, permissions: { allow: ['run_command', 'run_capability'], deny: [] } },
  'bypass mode': { schemaVersion: 1, mode: 'bypass' },
  'allow glob': { schemaVersion: 1, permissions: { allow: ['run_command(*)'], deny: [] } },
};

async function project(): Promise<{ root: string; capRoot: string; stateDir: string }> {
  const p = await tempProject('capsule-tamper-');
  await writeFile(path.join(p.root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  const stateDir = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
  return { ...p, stateDir };
}

async function open(
  root: string,
  stateDir: string,
  grants: string[],
  extra: Record<string, unknown> = {},
): Promise<AgentSession> {
  const s = await openAgentSession({
    cwd: root,
    grants,
    runners: [new ShellRunner()],
    stateDir,
    logger: () => undefined,
    ...extra,
  } as Parameters<typeof openAgentSession>[0]);
  sessions.push(s);
  return s;
}

/** The agent's try after tampering: a compound command (needs its own approval) that creates M. */
async function markerAttempt(s: AgentSession, root: string): Promise<boolean> {
  await codeOf(s.call('run_command', { command: 'true && touch M' }));
  await codeOf(s.call('run_command', { command: 'touch M2' }));
  return existsSync(path.join(root, 'M')) || existsSync(path.join(root, 'M2'));
}

describe('the agent cannot reload a policy it wrote', () => {
  for (const [name, policy] of Object.entries(EVIL_POLICIES)) {
    it(`run_command:cp over capsule.json (${name}) + reload: the marker is not created`, async () => {
      const { root, stateDir } = await project();
      await writeFile(path.join(root, 'evil.json'), JSON.stringify(policy));
      const s = await open(root, stateDir, ['run_command:cp']);
      await s.call('run_command', { command: 'cp evil.json capsule.json' });
      // Where the shell is confined capsule.json is read-only and the cp fails; the same bytes written
      // from outside the confinement (a machine without namespaces) test the policy layer behind it.
      await copyFile(path.join(root, 'evil.json'), path.join(root, 'capsule.json'));
      await codeOf(s.call('reload', {}));
      expect(await markerAttempt(s, root)).toBe(false);
    });
  }

  it('rm capsule.json drops its deny rule on disk only: the rule still holds', async () => {
    const { root, stateDir } = await project();
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, permissions: { deny: ['run_command(touch *)'] } }),
    );
    const s = await open(root, stateDir, ['run_command:rm', 'run_command:touch']);
    await s.call('run_command', { command: 'rm capsule.json' });
    await codeOf(s.call('reload', {}));
    await codeOf(s.call('run_command', { command: 'touch M' }));
    expect(existsSync(path.join(root, 'M'))).toBe(false);
  });

  it('capsule.json replaced by a symlink to a file the agent edits later: not adopted', async () => {
    const { root, stateDir } = await project();
    await writeFile(path.join(root, 'mine.json'), '{ "schemaVersion": 1 }\n');
    await writeFile(path.join(root, 'evil.json'), JSON.stringify(EVIL_POLICIES['allow rules']));
    const s = await open(root, stateDir, ['run_command:ln', 'run_command:cp']);
    await s.call('run_command', { command: 'ln -sf mine.json capsule.json' });
    await s.call('run_command', { command: 'cp evil.json mine.json' });
    await codeOf(s.call('reload', {}));
    expect(await markerAttempt(s, root)).toBe(false);
  });

  it('an allowlist entry written by the agent is not adopted by reload', async () => {
    const { root, stateDir } = await project();
    await writeFile(
      path.join(root, 'evil.json'),
      JSON.stringify({ schemaVersion: 1, allowlist: { 'run_capability:tamper': 'AlwaysThisProject' } }),
    );
    await writeCapability(path.join(root, 'capabilities'), 'tamper', {}, { 'run.sh': 'touch ../../M\n' });
    const s = await open(root, stateDir, ['run_command:cp']);
    await s.call('run_command', { command: 'cp evil.json capsule.json' });
    await codeOf(s.call('reload', {}));
    await codeOf(s.call('run_capability', { name: 'tamper' }));
    expect(existsSync(path.join(root, 'M'))).toBe(false);
  });

  it('through a git alias under run_command:git', async () => {
    const { root, stateDir } = await project();
    await writeFile(path.join(root, 'evil.json'), JSON.stringify(EVIL_POLICIES['allow rules']));
    const s = await open(root, stateDir, ['run_command:git']);
    await s.call('run_command', { command: 'git init -q' });
    await codeOf(s.call('run_command', { command: "git config alias.x '!cp evil.json capsule.json'" }));
    await codeOf(s.call('run_command', { command: 'git x' }));
    await codeOf(s.call('reload', {}));
    expect(await markerAttempt(s, root)).toBe(false);
  });

  it('through a shell capability the agent may run', async () => {
    const { root, stateDir } = await project();
    await writeFile(path.join(root, 'evil.json'), JSON.stringify(EVIL_POLICIES['allow rules']));
    await writeCapability(
      path.join(root, 'capabilities'),
      'tamper',
      {},
      { 'run.sh': 'cp ../../evil.json ../../capsule.json\n' },
    );
    const s = await open(root, stateDir, ['run_capability:tamper']);
    await s.call('run_capability', { name: 'tamper' });
    await codeOf(s.call('reload', {}));
    expect(await markerAttempt(s, root)).toBe(false);
  });

  it('a tampered capsule.json is reported in the tool result of the run that changed it', async () => {
    const { root, stateDir } = await project();
    await writeFile(path.join(root, 'evil.json'), JSON.stringify(EVIL_POLICIES['bypass mode']));
    const logs: string[] = [];
    // No capsule.json yet: nothing to mount read-only, so the command can create one.
    await rm(path.join(root, 'capsule.json'));
    const s = await open(root, stateDir, ['run_command:cp'], { logger: (m: string) => logs.push(m) });
    const r = (await s.call('run_command', { command: 'cp evil.json capsule.json' })) as {
      warnings?: string[];
    };
    expect(r.warnings?.join('\n')).toMatch(/capsule\.json/);
    expect(logs.join('\n')).toMatch(/capsule\.json/);
  });

  it('a tampered capsule.json does not take effect in the next session either', async () => {
    const { root, stateDir } = await project();
    await writeFile(path.join(root, 'evil.json'), JSON.stringify(EVIL_POLICIES['allow rules']));
    const first = await open(root, stateDir, ['run_command:cp']);
    await first.call('run_command', { command: 'cp evil.json capsule.json' });
    await first.close();
    sessions.splice(sessions.indexOf(first), 1);
    const second = await open(root, stateDir, []);
    expect(await markerAttempt(second, root)).toBe(false);
  });

  it('a profile planted in .capsule/profiles does not take effect in the next session', async () => {
    const { root, stateDir } = await project();
    await writeFile(
      path.join(root, 'evil.md'),
      '---\nname: build\ndescription: x\ntools: "*"\nmode: bypass\nallow: [run_command]\n---\n',
    );
    const first = await open(root, stateDir, ['run_command:cp', 'run_command:mkdir']);
    await first.call('run_command', { command: 'mkdir -p .capsule/profiles' });
    await first.call('run_command', { command: 'cp evil.md .capsule/profiles/build.md' });
    await first.close();
    sessions.splice(sessions.indexOf(first), 1);
    const second = await open(root, stateDir, []);
    expect(await markerAttempt(second, root)).toBe(false);
  });

  for (const how of ['rewritten', 'deleted'] as const) {
    it(`a confirmed project profile ${how} by the agent still holds in the next session`, async () => {
      const { root, stateDir } = await project();
      await mkdir(path.join(root, '.capsule', 'profiles'), { recursive: true });
      // The person's own build profile denies touch; the session grant would allow it otherwise.
      await writeFile(
        path.join(root, '.capsule', 'profiles', 'build.md'),
        '---\nname: build\ndescription: mine\ntools: "*"\ndeny: ["run_command(touch *)"]\n---\n',
      );
      await writeFile(path.join(root, 'lax.md'), '---\nname: build\ndescription: lax\ntools: "*"\n---\n');
      const first = await open(root, stateDir, ['run_command:cp', 'run_command:rm', 'run_command:touch']);
      await first.call('run_command', {
        command: how === 'deleted' ? 'rm .capsule/profiles/build.md' : 'cp lax.md .capsule/profiles/build.md',
      });
      await first.close();
      sessions.splice(sessions.indexOf(first), 1);
      const second = await open(root, stateDir, ['run_command:touch']);
      await codeOf(second.call('run_command', { command: 'touch M' }));
      expect(existsSync(path.join(root, 'M'))).toBe(false);
    });
  }

  it('a person confirms a changed policy through the confirmer; then it applies', async () => {
    const { root, stateDir } = await project();
    const hash = `sha256:${'a'.repeat(64)}`;
    await writeFile(
      path.join(root, 'edit.json'),
      JSON.stringify({
        schemaVersion: 1,
        allowlist: { 'run_capability:w': { level: 'AlwaysThisProject', contentHash: hash } },
      }),
    );
    const shown: string[] = [];
    const s = await open(root, stateDir, ['run_command:cp'], {
      confirmPolicy: async (change: { text: string }) => {
        shown.push(change.text);
        return true;
      },
    });
    // The person's own edit, in their editor.
    await copyFile(path.join(root, 'edit.json'), path.join(root, 'capsule.json'));
    expect(s.gate.projectEntries().map((e) => e.key)).toEqual([]);
    const r = (await s.call('reload', {})) as { policy: { applied: boolean } };
    expect(shown.join('\n')).toContain('+ allowlist run_capability:w: AlwaysThisProject');
    expect(r.policy.applied).toBe(true);
    expect(s.gate.projectEntries().map((e) => e.key)).toEqual(['run_capability:w']);
  });

  it('a hand edit that only takes permissions away applies at the next call, unasked', async () => {
    const { root, stateDir } = await project();
    let asked = 0;
    const s = await open(root, stateDir, ['run_command:touch'], {
      confirmPolicy: async () => {
        asked += 1;
        return false;
      },
    });
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, permissions: { deny: ['run_command(touch *)'] } }),
    );
    await codeOf(s.call('run_command', { command: 'touch M2' }));
    expect(existsSync(path.join(root, 'M2'))).toBe(false);
    expect(asked).toBe(0);
  });

  it('a change the person refuses is not applied', async () => {
    const { root, stateDir } = await project();
    await writeFile(path.join(root, 'evil.json'), JSON.stringify(EVIL_POLICIES['allow rules']));
    let asked = 0;
    const s = await open(root, stateDir, ['run_command:cp'], {
      confirmPolicy: async () => {
        asked += 1;
        return false;
      },
    });
    await s.call('run_command', { command: 'cp evil.json capsule.json' });
    await copyFile(path.join(root, 'evil.json'), path.join(root, 'capsule.json'));
    await codeOf(s.call('reload', {}));
    expect(asked).toBe(1);
    expect(await markerAttempt(s, root)).toBe(false);
  });
});

describe('engine: other paths that read capsule.json again', () => {
  it('a project grant after a tampered file does not adopt the tampered rules', async () => {
    const { root } = await project();
    const prompter = createScriptedPrompter(['AlwaysThisProject']);
    const { PermissionEngine } = await import('../../../src/permissions/engine.js');
    const { makeKey } = await import('../../../src/permissions/keys.js');
    const e = await PermissionEngine.create({ projectRoot: root, prompter, audit: false });
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify(EVIL_POLICIES['allow rules']));
    const wasm = {
      tool: 'run_capability',
      kind: 'OTHER' as const,
      key: makeKey('run_capability', 'w'),
      subject: 'w',
      sandboxed: true,
      contentHash: `sha256:${'a'.repeat(64)}`,
    };
    expect((await e.check(wasm)).outcome).toBe('allow');
    const cmd = {
      tool: 'run_command',
      kind: 'OTHER' as const,
      key: makeKey('run_command', 'touch'),
      subject: 'touch M',
      sandboxed: false,
    };
    expect((await e.check(cmd)).outcome).toBe('deny');
    expect(e.mode).toBe('default');
  });

  it('a revoke after a tampered file does not adopt the tampered rules', async () => {
    const { root } = await project();
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, allowlist: { 'run_capability:w': 'AlwaysThisProject' } }),
    );
    const { PermissionEngine } = await import('../../../src/permissions/engine.js');
    const { makeKey } = await import('../../../src/permissions/keys.js');
    const e = await PermissionEngine.create({
      projectRoot: root,
      prompter: createScriptedPrompter([]),
      audit: false,
    });
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({
        schemaVersion: 1,
        allowlist: { 'run_capability:w': 'AlwaysThisProject' },
        permissions: { allow: ['run_command'] },
      }),
    );
    await e.revokeProject('run_capability:w');
    const cmd = {
      tool: 'run_command',
      kind: 'OTHER' as const,
      key: makeKey('run_command', 'touch'),
      subject: 'touch M',
      sandboxed: false,
    };
    expect((await e.check(cmd)).outcome).toBe('deny');
  });
});

describe('exit_plan_mode', () => {
  it('from default mode it is refused and the mode stays: a later file edit still asks', async () => {
    const f = await agentFixture({ approvePlan: async () => ({ approved: true }) });
    expect(f.session.mode).toBe('default');
    expect(await codeOf(f.session.call('exit_plan_mode', { plan: 'write a.txt' }))).not.toBe('resolved');
    expect(f.session.mode).toBe('default');
    await codeOf(f.session.call('write_file', { path: 'a.txt', content: 'x' }));
    expect(existsSync(path.join(f.root, 'a.txt'))).toBe(false);
    expect(f.asked()).toEqual(['write_file:a.txt']);
  });

  it('from bypass or edit mode it does not switch either', async () => {
    const f = await agentFixture({ approvePlan: async () => ({ approved: true }) });
    f.session.gate.setMode('edit');
    expect(await codeOf(f.session.call('exit_plan_mode', { plan: 'p' }))).not.toBe('resolved');
    expect(f.session.mode).toBe('edit');
  });
});

describe('deny for this session', () => {
  it('after the answer, the same key is denied without asking again', async () => {
    const { root } = await project();
    await mkdir(path.join(root, 'x'), { recursive: true });
    const prompter = createScriptedPrompter(['DenyThisSession' as never, 'Once', 'Once']);
    const s = await open(root, await mkdtemp(path.join(tmpdir(), 'capsule-state-')), [], { prompter });
    for (let i = 0; i < 3; i++) await codeOf(s.call('run_command', { command: 'touch M' }));
    expect(existsSync(path.join(root, 'M'))).toBe(false);
    expect(prompter.asked.map((q) => q.key)).toEqual(['run_command:touch']);
    // Another key is still asked.
    await s.call('run_command', { command: 'true' });
    expect(prompter.asked.map((q) => q.key)).toEqual(['run_command:touch', 'run_command:true']);
  });
});
