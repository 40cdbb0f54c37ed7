import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';
import { eventually } from '../../helpers/eventually.js';
import { killAll, processesWith, survivors } from '../../helpers/processes.js';

/**
 * `capsule exec` ends the way a capability run does (docs/cli.md, "One limit, one field, one exit
 * code"): its time limit exits 124, Ctrl-C 130, whatever the signal that stopped the command; and the
 * command's processes are gone. Judged through the built binary by exit code and the processes left.
 */
const tokens: string[] = [];
/**
 * `sleep 900 0.N` with an N no other process has. /proc/PID/cmdline separates arguments by NUL, so
 * the token (`900\0` + `0.N`) is in sleep's command line and not in capsule's, whose one argument is
 * the whole command text.
 */
function sleeper(): { command: string; token: string } {
  const n = `0.${Math.floor(Math.random() * 1e9)}`;
  const token = `900\u0000${n}`;
  tokens.push(token);
  return { command: `sleep 900 ${n}`, token };
}
afterEach(() => {
  for (const t of tokens.splice(0)) killAll(t);
});

async function project(): Promise<string> {
  const { root } = await tempProject('capsule-exec-');
  await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}');
  return root;
}

function exec(root: string, args: string[]) {
  return execa('node', [BUILT_CLI, 'exec', '--grant', 'run_command:sleep', '--no-prompt', ...args], {
    cwd: root,
    reject: false,
    stdin: 'ignore',
  });
}

describe('capsule exec: one limit, one exit code', () => {
  it('past --timeout-ms the command is killed and capsule exits 124 (not 143)', async () => {
    const root = await project();
    const { command, token } = sleeper();
    const r = await exec(root, ['--timeout-ms', '200', '--', command]);
    expect(r.exitCode).toBe(124);
    expect(r.stderr).toMatch(/--timeout-ms/);
    expect(await survivors(token)).toEqual([]);
  });

  it('--json reports timedOut and still exits 124', async () => {
    const root = await project();
    const { command, token } = sleeper();
    const r = await exec(root, ['--json', '--timeout-ms', '200', '--', command]);
    expect(r.exitCode).toBe(124);
    expect(JSON.parse(r.stdout)).toMatchObject({ timedOut: true, canceled: false, truncated: false });
    expect(await survivors(token)).toEqual([]);
  });

  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    it(`${signal} to capsule stops the command's processes and exits 130`, async () => {
      const root = await project();
      const { command, token } = sleeper();
      const child = exec(root, ['--', command]);
      // Started: the command's process exists (an effect, not a delay).
      await eventually(() => processesWith(token).length > 0, 'the command started');
      child.kill(signal);
      const r = await child;
      expect(r.exitCode).toBe(130);
      expect(await survivors(token)).toEqual([]);
    });
  }

  it('a command that ends by itself keeps its own exit code', async () => {
    const root = await project();
    const r = await execa(
      'node',
      [BUILT_CLI, 'exec', '--grant', 'run_command:exit', '--no-prompt', '--', 'exit 3'],
      { cwd: root, reject: false, stdin: 'ignore' },
    );
    expect(r.exitCode).toBe(3);
  });

  it('a bad --timeout-ms is a usage error naming the flag, and nothing runs', async () => {
    const root = await project();
    const { command, token } = sleeper();
    for (const bad of ['0', 'soon', String(10 * 60_000 + 1)]) {
      const r = await exec(root, ['--timeout-ms', bad, '--', command]);
      expect(r.exitCode).toBe(64);
      expect(r.stderr).toMatch(/--timeout-ms/);
    }
    expect(processesWith(token)).toEqual([]);
  });

  it('capsule run: Ctrl-C stops a shell capability and exits 130 (the same signal path)', async () => {
    const { root, capRoot } = await tempProject('capsule-exec-');
    const { command, token } = sleeper();
    await writeCapability(capRoot, 'napper', {}, { 'run.sh': `${command}\n` });
    const child = execa(
      'node',
      [BUILT_CLI, 'run', 'napper', '--grant', 'run_capability:napper', '--no-prompt'],
      { cwd: root, reject: false, stdin: 'ignore' },
    );
    await eventually(() => processesWith(token).length > 0, 'the capability started');
    child.kill('SIGINT');
    const r = await child;
    expect(r.exitCode).toBe(130);
    expect(await survivors(token)).toEqual([]);
  });
});
