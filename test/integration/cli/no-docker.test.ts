import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { BUILT_CLI, REPO_ROOT } from '../../helpers/cli.js';

/**
 * A newcomer's first run on a machine with no Docker engine (DOCKER_HOST points at a socket nothing
 * listens on): the wasm default works, and every command that needs the engine says in one line what is
 * missing and a command that gets it, exit 69.
 */
const dead = `unix://${path.join(await mkdtemp(path.join(os.tmpdir(), 'capsule-nodocker-')), 'dead.sock')}`;

async function capsule(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, DOCKER_HOST: dead };
  delete env['CAPSULE_ENGINES'];
  delete env['CAPSULE_ENGINE'];
  const r = await execa(process.execPath, [BUILT_CLI, ...args], {
    cwd: REPO_ROOT,
    env,
    extendEnv: false,
    reject: false,
    input: '',
  });
  return { code: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe('no Docker engine on the machine', () => {
  it('the wasm default runs as the README shows', async () => {
    const r = await capsule('run', 'hello', '--grant', 'run_capability:hello', '--input', '{"name":"world"}');
    expect(r).toMatchObject({ code: 0, stdout: 'Hello, world!' });
  });

  const DOCKER_COMMANDS: string[][] = [
    ['run', 'hello-docker', '--grant', 'run_capability:hello-docker', '--input', '{"name":"world"}'],
    ['engines'],
    ['images', 'list'],
    ['images', 'build'],
  ];
  it.each(DOCKER_COMMANDS.map((args) => [args.join(' '), args] as const))(
    'capsule %s: one line naming what is missing and how to get it, exit 69',
    async (_shown, args) => {
      const r = await capsule(...args);
      expect(r.code).toBe(69);
      const lines = `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => l.trim() !== '');
      expect(lines).toHaveLength(1);
      const [line] = lines as [string];
      expect(line).toContain(`no Docker engine answers at ${dead}`);
      expect(line).toContain('DOCKER_HOST');
      // The command it offers is there to be pasted: the script it names exists.
      const script = /sudo bash (\S+provision-docker\.sh)/.exec(line)?.[1];
      expect(script !== undefined && existsSync(script)).toBe(true);
    },
  );

  it('capsule ci: the missing engine is said in full once, not again for every docker case', async () => {
    const r = await capsule('ci', 'capabilities/hello-docker', '--grant', 'run_capability:hello-docker');
    expect(r.code).toBe(1);
    const said = r.stderr.split('\n').filter((l) => l.includes(`no Docker engine answers at ${dead}`));
    expect(said).toHaveLength(1);
    // Both cases are still reported, the second by reference to the first.
    expect(r.stderr).toMatch(/hello-docker \/ greets as nobody \[docker\]/);
    expect(r.stderr).toMatch(/hello-docker \/ runs as uid 65534 \[docker\] .* the same as above/);
  });

  it('--json keeps the engine error for a program, and still exits 69', async () => {
    const r = await capsule('engines', '--json');
    expect(r.code).toBe(69);
    const rows = JSON.parse(r.stdout) as Array<{ healthy: boolean; error?: string }>;
    expect(rows).toMatchObject([{ healthy: false }]);
    expect(rows[0]?.error).toMatch(/ENOENT/);
  });
});
