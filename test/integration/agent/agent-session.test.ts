import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { intersectGrants } from '../../../src/agent/agent-session.js';
import { READ_ONLY_TOOL_NAMES } from '../../../src/tools/catalog.js';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';

describe('profiles in a session', () => {
  it('selecting a profile hides tools outside its allowlist, resets the mode and loads its rules', async () => {
    const f = await agentFixture({ answers: ['Deny'] });
    expect(f.session.toolNames()).toContain('write_file');
    f.session.gate.setMode('bypass');
    f.session.selectProfile('reviewer');
    expect(f.session.mode).toBe('default');
    expect(f.session.toolNames()).toEqual([...READ_ONLY_TOOL_NAMES, 'run_command']);
    expect(await codeOf(f.session.call('write_file', { path: 'a', content: 'x' }))).toBe('NOT_FOUND');
    // run_command(git *) is allowed by the reviewer profile; anything else asks.
    const git = (await f.session.call('run_command', { command: 'git --version' })) as { exitCode: number };
    expect(git.exitCode).toBe(0);
    expect(f.asked()).toEqual([]);
    expect(await codeOf(f.session.call('run_command', { command: 'touch marker' }))).toBe(
      'PERMISSION_DENIED',
    );
    expect(f.asked()).toEqual(['run_command:touch']);
    // A compound command that starts with git is not covered by run_command(git *).
    expect(await codeOf(f.session.call('run_command', { command: 'git --version && touch marker' }))).toBe(
      'PERMISSION_DENIED',
    );
    expect(existsSync(path.join(f.root, 'marker'))).toBe(false);
    f.session.selectProfile('plan');
    expect(f.session.mode).toBe('plan');
  });
});

describe('plan mode and sleep', () => {
  it('enter_plan_mode denies changes with a reason; an approved exit switches to edit mode', async () => {
    const verdicts = [{ approved: false, feedback: 'add tests' }, { approved: true }];
    const f = await agentFixture({ approvePlan: async () => verdicts.shift() ?? { approved: false } });
    await f.session.call('enter_plan_mode', {});
    await expect(f.session.call('write_file', { path: 'a.txt', content: 'x' })).rejects.toThrow(
      /exit_plan_mode/,
    );
    const rejected = (await f.session.call('exit_plan_mode', { plan: '1. write a.txt' })) as {
      message: string;
    };
    expect(rejected.message).toMatch(/not approved.*add tests.*exit_plan_mode again/);
    expect(f.session.mode).toBe('plan');
    await f.session.call('exit_plan_mode', { plan: '1. write a.txt\n2. tests' });
    expect(f.session.mode).toBe('edit');
    // Edit mode allows file edits without asking.
    await f.session.call('write_file', { path: 'a.txt', content: 'x' });
    expect(f.asked()).toEqual([]);
  });

  it('without a human to ask, exit_plan_mode stays in plan mode', async () => {
    const f = await agentFixture();
    await f.session.call('enter_plan_mode', {});
    await f.session.call('exit_plan_mode', { plan: 'p' });
    expect(f.session.mode).toBe('plan');
  });

  it('sleep is capped and rejects negative values', async () => {
    const f = await agentFixture();
    await expect(f.session.call('sleep', { seconds: -1 })).rejects.toThrow(/seconds: must not be negative/);
    const started = Date.now();
    expect(await f.session.call('sleep', { seconds: 0.05 })).toEqual({ slept: 0.05, capped: false });
    expect(Date.now() - started).toBeGreaterThanOrEqual(40);
    const ac = new AbortController();
    const p = f.session.call('sleep', { seconds: 1000 }, { signal: ac.signal });
    ac.abort();
    await expect(p).rejects.toThrow(/canceled/);
  });

  it('a canceled sleep is CANCELED (exit 130), not a usage error', async () => {
    const f = await agentFixture();
    const ac = new AbortController();
    const p = f.session.call('sleep', { seconds: 1000 }, { signal: ac.signal });
    ac.abort();
    expect(await codeOf(p)).toBe('CANCELED');
  });
});

describe('sub-agents', () => {
  it('a child exposes only Permission::None tools and cannot create a grandchild', async () => {
    const f = await agentFixture();
    const child = await f.session.createSubAgent();
    expect(child.depth).toBe(1);
    expect(child.toolNames()).toEqual([...READ_ONLY_TOOL_NAMES]);
    for (const name of f.session.tools().map((t) => t.name)) {
      if (child.toolNames().includes(name)) continue;
      expect(`${name}: ${await codeOf(child.call(name, {}))}`).toBe(`${name}: NOT_FOUND`);
    }
    expect(await codeOf(child.createSubAgent())).toBe('PERMISSION_DENIED');
    // Even selecting the build profile keeps a child read-only.
    child.selectProfile('build');
    expect(child.toolNames()).toEqual([...READ_ONLY_TOOL_NAMES]);
  });

  it('run_subagent runs read-only calls in the child and refuses anything else there', async () => {
    const f = await agentFixture();
    await writeFile(path.join(f.root, 'a.txt'), 'hello\n');
    const out = (await f.session.call('run_subagent', {
      task: 'look',
      calls: [
        { tool: 'read_file', arguments: { path: 'a.txt' } },
        { tool: 'write_file', arguments: { path: 'b.txt', content: 'x' } },
        {
          tool: 'run_subagent',
          arguments: { task: 'deeper', calls: [{ tool: 'glob', arguments: { pattern: '*' } }] },
        },
      ],
    })) as { depth: number; results: Array<{ ok: boolean; error?: string; result?: unknown }> };
    expect(out.depth).toBe(1);
    expect(out.results[0]).toMatchObject({ ok: true, result: { content: 'hello\n' } });
    expect(out.results[1]).toMatchObject({ ok: false });
    expect(out.results[2]?.error).toMatch(/sub-agent depth is locked at 1/);
    expect(existsSync(path.join(f.root, 'b.txt'))).toBe(false);
  });

  it("a child's grants are the intersection of its own and its parent's", async () => {
    const f = await agentFixture({ grants: ['run_capability:a', 'run_command:git:*'] });
    expect(f.session.heldGrants().sort()).toEqual(['run_capability:a', 'run_command:git:*']);
    expect(
      intersectGrants(
        ['run_capability:a', 'run_capability:b', 'run_command:git:status', 'run_command:*'],
        f.session.heldGrants(),
      ),
    ).toEqual(['run_capability:a', 'run_command:git:status']);
    const child = await f.session.createSubAgent({ grants: ['run_capability:a', 'run_capability:b'] });
    expect(child.heldGrants()).toEqual(['run_capability:a']);
  });
});
