import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { machine } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject } from '../../helpers/capability.js';

interface Report {
  findings: Array<{
    kind: string;
    text: string;
    origin: string;
    counterexamples: Array<{ command: string; key: string; why: string }>;
    asks: Array<{ command: string; key: string; why: string }>;
  }>;
  claude: Array<{
    kind: string;
    text: string;
    capsule: string[];
    key?: { key: string; compound: boolean };
    note?: string;
  }>;
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
    expect(hole?.counterexamples.map((c) => c.command)).toContain('git commit --allow-empty -m x');
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

  it('a Claude rule that maps to a capsule rule that can never match is reported, and fails the check', async () => {
    const root = await project();
    const file = path.join(root, 'settings.json');
    await writeFile(file, JSON.stringify({ permissions: { allow: ['Bash(gi*:*)'] } }));
    const r = await cli(['rules', 'check', '--json', '--profile', 'build', '--claude-settings', file], {
      cwd: root,
    });
    expect(r.code).toBe(1);
    const report = JSON.parse(r.stdout) as Report;
    expect(report.claude.find((c) => c.text === 'Bash(gi*:*)')?.note).toContain('can never match');
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

/**
 * A project whose files are hostile (a Makefile, package.json scripts, a git hook, scripts): whatever
 * they run creates the marker M. Victims v and x are what deny rules protect.
 */
async function hostile(config: Record<string, unknown> = {}): Promise<string> {
  const root = await project(config);
  const files: Record<string, string> = {
    Makefile: '.PHONY: all install x\nall install x:\n\ttouch M\n',
    'package.json': JSON.stringify({
      name: 'h',
      version: '1.0.0',
      scripts: { test: 'touch M', build: 'touch M', preinstall: 'touch M' },
    }),
    'x.sh': 'touch M\n',
    'x.py': 'import os\nos.system("touch M")\n',
    'x.js': 'require("child_process").execSync("touch M")\n',
    'x.pl': 'system("touch M");\n',
    v: 'victim',
    x: 'victim',
  };
  for (const [name, text] of Object.entries(files)) await writeFile(path.join(root, name), text);
  await execa('git', ['init', '-q'], { cwd: root });
  await writeFile(path.join(root, '.git', 'hooks', 'pre-commit'), '#!/bin/sh\ntouch M\n', { mode: 0o755 });
  return root;
}

const harmed = (root: string): boolean =>
  existsSync(path.join(root, 'M')) || !existsSync(path.join(root, 'v')) || !existsSync(path.join(root, 'x'));

describe('capsule rules check prints only real counterexamples', () => {
  const rules = {
    allow: [
      'run_command(make *)',
      'run_command(npm *)',
      'run_command(git *)',
      'run_command(bash *)',
      'run_command(python3 *)',
      'run_command(node *)',
      'run_command(*)',
    ],
    deny: ['run_command(rm v)', 'run_command(rm *)', 'run_command(rm -rf *)', 'run_command(git push*)'],
  };

  it('each one, run for real, does what the rule was meant to stop', async () => {
    const root = await hostile({ permissions: rules });
    const { report } = await check(root, ['--profile', 'build', '--grant', 'run_command:make']);
    const all = report.findings.flatMap((f) => f.counterexamples.map((c) => ({ finding: f, c })));
    // Not vacuous: the literal deny rule and the allow rules of programs that run project files have some.
    expect(all.filter((a) => a.finding.kind === 'deny').length).toBeGreaterThan(0);
    expect(all.filter((a) => a.finding.kind !== 'deny').length).toBeGreaterThan(0);
    for (const { finding, c } of all) {
      if (finding.kind === 'deny') {
        // Under that deny rule alone, in bypass mode: the counterexample really passes it.
        const victim = await hostile({ permissions: { deny: [finding.text] } });
        const r = await cli(['exec', '--mode', 'bypass', '--no-prompt', '--', c.command], { cwd: victim });
        expect(harmed(victim), `${finding.text} misses ${c.command}: ${r.stderr}`).toBe(true);
      } else {
        // What the rule admits runs what the project's files say.
        const victim = await hostile();
        await execa('bash', ['-c', c.command], { cwd: victim, reject: false });
        expect(harmed(victim), `${finding.text} admits ${c.command}`).toBe(true);
      }
    }
  });

  it("git's global options are tried on git only, never on make or npm", async () => {
    const root = await hostile({ permissions: { allow: ['run_command(make *)', 'run_command(npm *)'] } });
    const { report } = await check(root, ['--profile', 'build']);
    const printed = report.findings.flatMap((f) => f.counterexamples.map((c) => c.command));
    expect(printed.length).toBeGreaterThan(0);
    for (const command of printed)
      expect(command).not.toMatch(/--git-dir|-C other|--exec-path|alias\.|--ext-diff/);
  });

  it('finds the wrapper forms a deny rule must hold against; capsule asks for them, none is a hole', async () => {
    const root = await hostile({ permissions: { deny: ['run_command(rm *)'] } });
    const { report } = await check(root, ['--profile', 'build']);
    const finding = report.findings.find((f) => f.kind === 'deny' && f.text === 'run_command(rm *)');
    expect(finding?.counterexamples).toEqual([]);
    const asked = finding?.asks.map((c) => c.command) ?? [];
    for (const form of [
      'setpriv rm x',
      'ssh-agent rm x',
      `setarch ${machine()} rm x`,
      'linux64 rm x',
      'perf stat -o /dev/null rm x',
    ])
      expect(asked).toContain(form);
    expect(asked.some((c) => /^sg \S+ -c 'rm x'$/.test(c))).toBe(true);
    for (const a of finding?.asks ?? [])
      expect(a.why).toMatch(/not known to keep its arguments|cannot be known/);
  });
});
