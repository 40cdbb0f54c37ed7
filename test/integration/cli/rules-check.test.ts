import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject } from '../../helpers/capability.js';

interface Report {
  findings: Array<{
    kind: string;
    text: string;
    origin: string;
    counterexamples: Array<{ command: string; key: string; why: string }>;
  }>;
  claude: Array<{ kind: string; text: string; capsule: string[]; key?: { key: string; compound: boolean } }>;
  counterexamples: number;
}

async function project(config: Record<string, unknown> = {}): Promise<string> {
  const { root } = await tempProject('capsule-rulescheck-');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1, ...config }));
  return root;
}

async function check(root: string, args: string[] = []): Promise<{ code: number; report: Report }> {
  const r = await cli(['rules', 'check', '--json', ...args], { cwd: root });
  return { code: r.code, report: JSON.parse(r.stdout) as Report };
}

describe('capsule rules check', () => {
  it("finds the old reviewer profile's git * hole in a project that still has it", async () => {
    const root = await project();
    await mkdir(path.join(root, '.capsule', 'profiles'), { recursive: true });
    await writeFile(
      path.join(root, '.capsule', 'profiles', 'reviewer.md'),
      '---\nname: reviewer\ndescription: old\ntools: [read_file, run_command]\nallow:\n  - run_command(git *)\n---\nReview.\n',
    );
    const { code, report } = await check(root);
    expect(code).toBe(1);
    const hole = report.findings.find((f) => f.text === 'run_command(git *)');
    expect(hole?.origin).toContain(path.join('.capsule', 'profiles', 'reviewer.md'));
    expect(hole?.counterexamples.map((c) => c.command)).toContain('git commit -m x');
    expect(hole?.counterexamples.every((c) => c.key === 'run_command:git')).toBe(true);
  });

  it('the shipped profiles and an empty capsule.json have no counterexample', async () => {
    const root = await project();
    const { code, report } = await check(root);
    expect(report.counterexamples).toBe(0);
    expect(code).toBe(0);
    expect(report.findings.some((f) => f.text === 'run_command(git diff *)')).toBe(true);
  });

  it('a bare allow rule and a glob program are reported; deny rules hold against the rewrite families', async () => {
    const root = await project({
      permissions: { allow: ['run_command(*)'], deny: ['run_command(rm -rf *)', 'run_command(git push*)'] },
    });
    const { code, report } = await check(root, ['--profile', 'build']);
    expect(code).toBe(1);
    const star = report.findings.find((f) => f.text === 'run_command(*)');
    expect(star?.counterexamples.length).toBeGreaterThan(0);
    for (const text of ['run_command(rm -rf *)', 'run_command(git push*)']) {
      const deny = report.findings.find((f) => f.kind === 'deny' && f.text === text);
      expect(deny?.counterexamples).toEqual([]);
    }
  });

  it('--grant keys are checked like allow rules', async () => {
    const root = await project();
    const { code, report } = await check(root, ['--profile', 'build', '--grant', 'run_command:make']);
    expect(code).toBe(1);
    expect(report.findings.find((f) => f.kind === 'grant')?.counterexamples[0]?.why).toContain('build file');
  });

  it('judges a Claude Code settings.json permissions block', async () => {
    const root = await project();
    const file = path.join(root, 'settings.json');
    await writeFile(
      file,
      JSON.stringify({
        permissions: {
          allow: ['Bash(git diff:*)', 'Bash(npm run build)', 'Read(~/.zshrc)'],
          deny: ['Bash(curl:*)'],
        },
      }),
    );
    const { code, report } = await check(root, ['--profile', 'build', '--claude-settings', file]);
    expect(report.claude.find((r) => r.text === 'Bash(git diff:*)')?.capsule).toEqual([
      'run_command(git diff)',
      'run_command(git diff *)',
    ]);
    expect(report.claude.find((r) => r.text === 'Bash(git diff:*)')?.key).toEqual({
      key: 'run_command:git',
      compound: false,
    });
    expect(report.claude.find((r) => r.text === 'Read(~/.zshrc)')?.capsule).toEqual([]);
    const npm = report.findings.find((f) => f.text === 'run_command(npm run build)');
    expect(npm?.origin).toBe(`claude:${file}`);
    expect(npm?.counterexamples.length).toBe(1);
    expect(report.findings.find((f) => f.text === 'run_command(curl *)')?.counterexamples).toEqual([]);
    expect(code).toBe(1);
  });

  it('a settings file without a permissions block is a USAGE error naming the file', async () => {
    const root = await project();
    const file = path.join(root, 'settings.json');
    await writeFile(file, '{"model":"x"}');
    const r = await cli(['rules', 'check', '--claude-settings', file], { cwd: root });
    expect(r.code).toBe(64);
    expect(r.stderr).toContain(file);
  });
});
