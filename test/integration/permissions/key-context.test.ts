import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCommandParser, type CommandParser } from '../../../src/permissions/commands/parser.js';
import { keyCommand } from '../../../src/permissions/commands/permission.js';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';

let parser: CommandParser;
beforeAll(async () => {
  parser = await createCommandParser();
});
afterAll(() => parser.close());

/**
 * Commands built from pieces whose layout matters to bash (blanks, carriage returns, newlines,
 * continuations, separators); every one is compound (it starts with `true` and a separator).
 */
function variants(): string[] {
  const heads = ['true;', 'true ;', 'true;\r', 'true\n', 'true\r\n', 'true;\n\n'];
  const words = ['a', "'a b'", 'a\\ b', '"c"'];
  const gaps = [' ', '  ', '\t', '\r', '\n', ' \\\n', '\r\n', ';', ' ; ', '\n\n', ' \\\r\n'];
  const out: string[] = [];
  for (const head of heads)
    for (const a of words)
      for (const gap of gaps)
        for (const b of ['b', "'b c'"]) out.push(`${head} printf '[%s]' ${a}${gap}${b}`);
  return out;
}

describe('compound keys are injective: commands that share a key behave the same in bash', () => {
  it('over a generated set of layout variants, every key group runs identically', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-inject-'));
    const groups = new Map<string, string[]>();
    for (const command of variants()) {
      const k = keyCommand(parser, command);
      expect(k.compound).toBe(true);
      groups.set(k.key, [...(groups.get(k.key) ?? []), command]);
    }
    const behaviour = async (command: string): Promise<string> => {
      const r = await execa('bash', ['--noprofile', '--norc', '-c', command], { cwd: dir, reject: false });
      return `${r.exitCode}:${r.stdout}`;
    };
    const shared: Array<{ key: string; commands: string[]; seen: string[] }> = [];
    for (const [key, commands] of groups) {
      if (commands.length < 2) continue;
      const seen = [...new Set(await Promise.all(commands.map(behaviour)))];
      if (seen.length > 1) shared.push({ key, commands, seen });
    }
    expect(shared).toEqual([]);
    // The generator really produces commands that share keys (so the property was exercised).
    expect([...groups.values()].some((c) => c.length > 1)).toBe(true);
  }, 120_000);
});

describe('a relative program is keyed with the folder it runs in', () => {
  it('--grant run_command:./build.sh covers the root one, not sub/build.sh run with cwd sub', async () => {
    const f = await agentFixture({ grants: ['run_command:./build.sh'] });
    await writeFile(path.join(f.root, 'build.sh'), '#!/bin/sh\necho root\n');
    await mkdir(path.join(f.root, 'sub'));
    await writeFile(path.join(f.root, 'sub', 'build.sh'), `#!/bin/sh\ntouch ${path.join(f.root, 'M')}\n`);
    await chmod(path.join(f.root, 'build.sh'), 0o755);
    await chmod(path.join(f.root, 'sub', 'build.sh'), 0o755);
    expect(await codeOf(f.session.call('run_command', { command: './build.sh', cwd: 'sub' }))).toBe(
      'PERMISSION_DENIED',
    );
    expect(existsSync(path.join(f.root, 'M'))).toBe(false);
    const r = (await f.session.call('run_command', { command: './build.sh' })) as { stdout: string };
    expect(r.stdout).toBe('root\n');
  });

  it('an allow rule run_command(./build.sh) allows the root one only', async () => {
    const f = await agentFixture();
    // A rule of this process (as a built-in profile's): a project file's allow rule would not apply to
    // a host command at all (the ceiling), so it could not show what the rule covers.
    f.session.gate.setProfileRules([
      { origin: 'test', trust: 'process', allow: ['run_command(./build.sh)'] },
    ]);
    await writeFile(path.join(f.root, 'build.sh'), '#!/bin/sh\necho root\n');
    await mkdir(path.join(f.root, 'sub'));
    await writeFile(path.join(f.root, 'sub', 'build.sh'), `#!/bin/sh\ntouch ${path.join(f.root, 'M')}\n`);
    await chmod(path.join(f.root, 'build.sh'), 0o755);
    await chmod(path.join(f.root, 'sub', 'build.sh'), 0o755);
    expect(await codeOf(f.session.call('run_command', { command: './build.sh', cwd: 'sub' }))).toBe(
      'PERMISSION_DENIED',
    );
    expect(existsSync(path.join(f.root, 'M'))).toBe(false);
    const r = (await f.session.call('run_command', { command: './build.sh' })) as { stdout: string };
    expect(r.stdout).toBe('root\n');
    expect(f.asked()).toEqual([`run_command:${path.join(f.root, 'sub', 'build.sh')}`]);
  });

  it('a compound grant made for the root does not cover the same text run in another folder', async () => {
    const command = './build.sh && true';
    const f = await agentFixture({ grants: [`run_command:${command}`] });
    await writeFile(path.join(f.root, 'build.sh'), '#!/bin/sh\necho root\n');
    await mkdir(path.join(f.root, 'sub'));
    await writeFile(path.join(f.root, 'sub', 'build.sh'), `#!/bin/sh\ntouch ${path.join(f.root, 'M')}\n`);
    await chmod(path.join(f.root, 'build.sh'), 0o755);
    await chmod(path.join(f.root, 'sub', 'build.sh'), 0o755);
    expect(await codeOf(f.session.call('run_command', { command, cwd: 'sub' }))).toBe('PERMISSION_DENIED');
    expect(existsSync(path.join(f.root, 'M'))).toBe(false);
    expect(f.asked()).toEqual([`run_command:cd -- 'sub'\n${command}`]);
    const r = (await f.session.call('run_command', { command })) as { stdout: string };
    expect(r.stdout).toBe('root\n');
  });

  it('the keys name the resolved path', () => {
    expect(keyCommand(parser, './build.sh', '/p/sub').key).toBe('run_command:/p/sub/build.sh');
    expect(keyCommand(parser, '../x/run', '/p/sub').key).toBe('run_command:/p/x/run');
    expect(keyCommand(parser, 'make', '/p/sub').key).toBe('run_command:make');
  });
});
