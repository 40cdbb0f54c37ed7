import { existsSync } from 'node:fs';
import { mkdtemp, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { tempProject } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';

// capsule reload: a person confirms a changed policy in a terminal; until then every CLI process
// keeps the confirmed one. A real pseudo-terminal (script(1)) stands in for the person's terminal.

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the CLI integration tests');
});

async function setup(config: unknown): Promise<{ root: string; env: Record<string, string> }> {
  const { root } = await tempProject('capsule-reload-');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify(config));
  const state = await mkdtemp(path.join(tmpdir(), 'capsule-reload-state-'));
  return { root, env: { CAPSULE_STATE_DIR: state } };
}

async function capsule(root: string, env: Record<string, string>, args: string[]) {
  const r = await execa('node', [BUILT_CLI, ...args], {
    cwd: root,
    env,
    reject: false,
    input: '',
    timeout: 60_000,
  });
  return { code: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** `capsule reload` in a pseudo-terminal, the person typing `answer`. */
async function reloadInTerminal(root: string, env: Record<string, string>, answer: string) {
  const r = await execa('script', ['-qec', `node ${BUILT_CLI} reload`, '/dev/null'], {
    cwd: root,
    env: { ...process.env, ...env },
    reject: false,
    input: `${answer}\n`,
    timeout: 60_000,
  });
  return { code: r.exitCode ?? -1, output: r.stdout };
}

const snapshots = async (env: Record<string, string>) =>
  readdir(path.join(env.CAPSULE_STATE_DIR as string, 'policy')).catch(() => [] as string[]);

describe('capsule reload', () => {
  it('without a terminal it shows the difference, changes nothing and exits 77', async () => {
    const { root, env } = await setup({
      schemaVersion: 1,
      permissions: { allow: ['run_command(git status)'] },
    });
    const r = await capsule(root, env, ['reload', '--json']);
    expect(r.code).toBe(77);
    const out = JSON.parse(r.stdout) as { diff: string[]; confirmed: boolean; firstConfirmation: boolean };
    expect(out).toMatchObject({ confirmed: false, firstConfirmation: true });
    expect(out.diff).toEqual(['+ allow rule run_command(git status)']);
    expect(await snapshots(env)).toEqual([]);
    expect((await capsule(root, env, ['reload', '--no-prompt'])).code).toBe(77);
  });

  it('after a confirmation, a widening edit is not applied by later commands until confirmed again', async () => {
    const { root, env } = await setup({ schemaVersion: 1 });
    const first = await reloadInTerminal(root, env, 'y');
    expect(first.code).toBe(0);
    expect(await snapshots(env)).toHaveLength(1);
    // Someone (an agent's command, a pull request) widens the policy on disk.
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, mode: 'bypass', permissions: { allow: ['run_command(touch *)'] } }),
    );
    const exec = await capsule(root, env, ['exec', '--no-prompt', '--', 'touch M']);
    expect(existsSync(path.join(root, 'M'))).toBe(false);
    expect(exec.code).toBe(77);
    expect(exec.stderr).toMatch(/capsule reload/);
    // The person looks at it and says no: still not applied.
    const refused = await reloadInTerminal(root, env, 'n');
    expect(refused.output).toMatch(/\+ allow rule run_command\(touch \*\)/);
    expect(refused.output).toMatch(/mode: default → bypass/);
    expect(refused.code).toBe(77);
    await capsule(root, env, ['exec', '--no-prompt', '--', 'touch M']);
    expect(existsSync(path.join(root, 'M'))).toBe(false);
  });

  it('a hand edit that only tightens the policy applies at once', async () => {
    const { root, env } = await setup({ schemaVersion: 1 });
    expect((await reloadInTerminal(root, env, 'y')).code).toBe(0);
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, permissions: { deny: ['run_command(touch *)'] } }),
    );
    const r = await capsule(root, env, [
      'exec',
      '--grant',
      'run_command:touch',
      '--no-prompt',
      '--',
      'touch M',
    ]);
    expect(existsSync(path.join(root, 'M'))).toBe(false);
    expect(r.code).toBe(77);
  });

  it('a project with no confirmation yet runs on its files as they are', async () => {
    const { root, env } = await setup({ schemaVersion: 1, permissions: { deny: ['run_command(touch *)'] } });
    const r = await capsule(root, env, [
      'exec',
      '--grant',
      'run_command:touch',
      '--no-prompt',
      '--',
      'touch M',
    ]);
    expect(r.code).toBe(77);
    expect(existsSync(path.join(root, 'M'))).toBe(false);
    expect(await snapshots(env)).toEqual([]);
  });
});
