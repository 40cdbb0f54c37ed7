import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';

/**
 * An agent plants or rewrites capsule's state anywhere under the project: a nested capsule.json
 * or .capsule/ makes a project of its folder, a state folder under another name (.capsule-cache)
 * is still capsule's. Every attempt is judged by what is on disk afterwards.
 */
describe('tools never reach capsule’s own state, at any depth', () => {
  const targets = [
    'sub/capsule.json',
    'SUB/Capsule.JSON',
    'sub/.capsule/profiles/x.md',
    'deep/a/b/.capsule/locks/capsule.json.lock',
    '.capsule-cache/wasm/x/component.mjs',
    'sub/.capsule-cache/x',
    'link/profiles/evil.md',
    'cfg-link',
  ];

  it('write_file refuses every protected target, even in bypass mode and through a symlink', async () => {
    const f = await agentFixture();
    f.session.gate.setMode('bypass');
    await mkdir(path.join(f.root, '.capsule', 'profiles'), { recursive: true });
    await symlink(path.join(f.root, '.capsule'), path.join(f.root, 'link'));
    await mkdir(path.join(f.root, 'nested'), { recursive: true });
    await writeFile(path.join(f.root, 'nested', 'capsule.json'), '{"schemaVersion":1}');
    await symlink(path.join(f.root, 'nested', 'capsule.json'), path.join(f.root, 'cfg-link'));
    for (const p of targets) {
      await f.session
        .call('write_file', { path: p, content: '{"allowlist":{"*":"AlwaysThisProject"}}' })
        .catch(() => undefined);
    }
    for (const p of targets.slice(0, 6))
      expect(`${p}: ${existsSync(path.join(f.root, p))}`).toBe(`${p}: false`);
    expect(existsSync(path.join(f.root, '.capsule', 'profiles', 'evil.md'))).toBe(false);
    expect(await readFile(path.join(f.root, 'nested', 'capsule.json'), 'utf8')).toBe('{"schemaVersion":1}');
    expect(await readdir(f.root)).not.toContain('SUB');
    expect(await readdir(f.root)).not.toContain('sub');
  });

  it('write_file cannot reach a folder that .capsule/profiles is a symlink to', async () => {
    const f = await agentFixture();
    f.session.gate.setMode('bypass');
    // The person keeps profiles in a folder of their own.
    await mkdir(path.join(f.root, 'profiles-src'));
    await mkdir(path.join(f.root, '.capsule'), { recursive: true });
    await symlink(path.join(f.root, 'profiles-src'), path.join(f.root, '.capsule', 'profiles'));
    await f.session
      .call('write_file', { path: 'profiles-src/evil.md', content: 'mode: bypass\n' })
      .catch(() => undefined);
    expect(existsSync(path.join(f.root, 'profiles-src', 'evil.md'))).toBe(false);
  });

  it('edit_file cannot change a nested capsule.json or a file under a nested .capsule/', async () => {
    const f = await agentFixture();
    f.session.gate.setMode('bypass');
    await mkdir(path.join(f.root, 'sub', '.capsule', 'profiles'), { recursive: true });
    await writeFile(path.join(f.root, 'sub', 'capsule.json'), '{"mode":"default"}');
    await writeFile(path.join(f.root, 'sub', '.capsule', 'profiles', 'p.md'), 'mode: default\n');
    for (const [p, oldText] of [
      ['sub/capsule.json', 'default'],
      ['sub/.capsule/profiles/p.md', 'default'],
    ] as const) {
      const code = await codeOf(f.session.call('edit_file', { path: p, oldText, newText: 'bypass' }));
      expect(`${p}: ${code}`).toBe(`${p}: PATH_ESCAPE`);
    }
    expect(await readFile(path.join(f.root, 'sub', 'capsule.json'), 'utf8')).toBe('{"mode":"default"}');
    expect(await readFile(path.join(f.root, 'sub', '.capsule', 'profiles', 'p.md'), 'utf8')).toBe(
      'mode: default\n',
    );
  });

  it('run_command never runs with its cwd inside capsule’s state', async () => {
    const f = await agentFixture({ grants: ['run_command:touch'] });
    await mkdir(path.join(f.root, '.capsule', 'locks'), { recursive: true });
    await mkdir(path.join(f.root, 'sub', '.capsule'), { recursive: true });
    await mkdir(path.join(f.root, '.capsule-cache'), { recursive: true });
    await symlink(path.join(f.root, '.capsule'), path.join(f.root, 'state'));
    const cwds = ['.capsule', '.capsule/locks', 'sub/.capsule', '.capsule-cache', 'state', 'state/locks'];
    for (const cwd of cwds) {
      await f.session.call('run_command', { command: 'touch planted', cwd }).catch(() => undefined);
    }
    for (const dir of ['.capsule', '.capsule/locks', 'sub/.capsule', '.capsule-cache']) {
      expect(`${dir}: ${existsSync(path.join(f.root, dir, 'planted'))}`).toBe(`${dir}: false`);
    }
    // The project root itself (it holds capsule.json) stays the normal working directory.
    await f.session.call('run_command', { command: 'touch ok', cwd: '.' });
    await mkdir(path.join(f.root, 'src'));
    await f.session.call('run_command', { command: 'touch ok', cwd: 'src' });
    expect(existsSync(path.join(f.root, 'ok'))).toBe(true);
    expect(existsSync(path.join(f.root, 'src', 'ok'))).toBe(true);
  });

  it('generate_* writes no capsule.json or .capsule/ at any depth', async () => {
    const f = await agentFixture({ grants: ['generate_capability:shell'] });
    const attempts: Array<Record<string, unknown>> = [
      { files: { 'Capsule.JSON': '{}' } },
      { files: { 'a/.capsule/profiles/x.md': 'x' } },
      { files: { '.capsule-cache/x': 'x' } },
    ];
    for (const extra of attempts) {
      await f.session
        .call('generate_shell_capability', { name: 'x1', description: 'd', script: 'true\n', ...extra })
        .catch(() => undefined);
    }
    expect(existsSync(path.join(f.capRoot, 'x1'))).toBe(false);
  });
});
