import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { builtCli, cli } from '../../helpers/cli.js';
import { tempProject, writeCapability, writeManifest } from '../../helpers/capability.js';

/** A project with a capability `hello` and the given capsule.json (beyond schemaVersion). */
async function project(config: Record<string, unknown> = {}): Promise<string> {
  const { root, capRoot } = await tempProject('capsule-never-');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1, ...config }));
  await writeCapability(capRoot, 'hello', {}, { 'run.sh': 'echo hi\n' });
  return root;
}

const NEVER = [
  ['run_capability:Hello', /capability names are lower case[\s\S]*run_capability:hello/],
  ['run_capability:hel*', /names one capability exactly[\s\S]*run_capability:\*/],
  ['bogus_tool:x', /bogus_tool is not a tool capsule asks about[\s\S]*run_command, run_capability/],
  ['write_file:/etc/**', /paths relative to the project root/],
  ['write_file:../outside/x', /paths relative to the project root/],
  ['generate_capability:python', /keys name an environment[\s\S]*generate_capability:shell/],
  ['run_command:ech*', /never a pattern/],
] as const;

describe('a grant that can never match is refused (64) before anything runs', () => {
  it.each(NEVER)('capsule exec --grant %s', async (grant, message) => {
    const root = await project();
    const r = await cli(
      ['exec', '--no-prompt', '--grant', grant, '--grant', 'run_command:touch', '--', 'touch M'],
      {
        cwd: root,
      },
    );
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(message);
    expect(existsSync(path.join(root, 'M'))).toBe(false);
  });

  it.each(NEVER)('capsule mcp --grant %s exits 64 before it serves', async (grant, message) => {
    const root = await project();
    const r = await builtCli(['mcp', '--grant', grant], { cwd: root });
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
  });

  it('grants that can match are taken: a known capability gets no warning, an unknown one a warning with the closest names', async () => {
    const root = await project();
    for (const grant of [
      'run_capability:*',
      'run_capability:hello',
      'write_file:src/**',
      'generate_capability:shell',
    ]) {
      const r = await cli(
        ['exec', '--no-prompt', '--grant', grant, '--grant', 'run_command:touch', '--', 'touch M'],
        {
          cwd: root,
        },
      );
      expect(r.code, `${grant}: ${r.stderr}`).toBe(0);
      expect(r.stderr, grant).not.toMatch(/matches no capability/);
    }
    const near = await cli(
      ['exec', '--no-prompt', '--grant', 'run_capability:helo', '--grant', 'run_command:true', '--', 'true'],
      { cwd: root },
    );
    expect(near.code).toBe(0);
    expect(near.stderr).toMatch(
      /run_capability:helo matches no capability in this project today \(closest: hello\)/,
    );
  });

  it('a grant of a capability whose manifest is invalid says so, naming the manifest (not "the project has none")', async () => {
    const { root, capRoot } = await tempProject('capsule-never-');
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
    const manifest = await writeManifest(path.join(capRoot, 'broken'), { schemaVersion: 1, name: 'broken' });
    const r = await cli(
      [
        'exec',
        '--no-prompt',
        '--grant',
        'run_capability:broken',
        '--grant',
        'run_command:true',
        '--',
        'true',
      ],
      { cwd: root },
    );
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(`run_capability:broken: its folder holds an invalid manifest (${manifest})`);
    expect(r.stderr).not.toMatch(/it has none/);
  });
});

describe('a rule or allowlist key that can never match is a config error naming the file and field', () => {
  it.each([
    [
      { permissions: { allow: ['run_command(gi* *)'] } },
      'permissions.allow[0]',
      /names its program literally/,
    ],
    [{ permissions: { allow: ['write_file(/etc/**)'] } }, 'permissions.allow[0]', /outside it/],
    [{ permissions: { deny: ['run_command(rm *)', 'bogus_tool(x)'] } }, 'permissions.deny[1]', /not a tool/],
    [{ permissions: { allow: ['run_capability(Hello)'] } }, 'permissions.allow[0]', /lower case/],
    [
      { allowlist: { 'run_capability:Hello': 'AlwaysThisProject' } },
      'allowlist.run_capability:Hello',
      /lower case/,
    ],
  ])('%j', async (config, field, message) => {
    const root = await project(config);
    const r = await cli(['exec', '--no-prompt', '--grant', 'run_command:touch', '--', 'touch M'], {
      cwd: root,
    });
    expect(r.code).toBe(78);
    expect(r.stderr).toContain(path.join(root, 'capsule.json'));
    expect(r.stderr).toContain(field);
    expect(r.stderr).toMatch(message);
    expect(existsSync(path.join(root, 'M'))).toBe(false);
    // rules check refuses it too, instead of calling it "ok".
    const check = await cli(['rules', 'check'], { cwd: root });
    expect(check.code).toBe(78);
    expect(check.stdout).not.toMatch(/^ok /m);
  });

  it('in a project profile: the profile file and its field', async () => {
    const root = await project();
    const dir = path.join(root, '.capsule', 'profiles');
    await mkdir(dir, { recursive: true });
    await writeFile(
      path.join(dir, 'tidy.md'),
      '---\nname: tidy\ndescription: x\ntools: [run_command]\nallow:\n  - run_command(gi* *)\n---\nTidy.\n',
    );
    const r = await cli(['rules', 'check', '--profile', 'tidy'], { cwd: root });
    expect(r.code).toBe(78);
    expect(r.stderr).toContain(path.join(dir, 'tidy.md'));
    expect(r.stderr).toContain('allow[0]');
    expect(r.stderr).toMatch(/names its program literally/);
  });
});
