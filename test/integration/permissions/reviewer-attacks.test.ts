import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { agentFixture, codeOf, type Fixture } from '../../helpers/agent-fixture.js';

/** The reviewer profile in a git repository; a second repository `other/` whose config runs programs. */
async function reviewer(): Promise<Fixture> {
  const f = await agentFixture({ profile: 'reviewer', answers: [] });
  const git = (args: string[], cwd = f.root) => execa('git', args, { cwd });
  await git(['init', '-q']);
  await git(['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '--allow-empty', '-m', 'x']);
  const other = path.join(f.root, 'other');
  await mkdir(other);
  await git(['init', '-q'], other);
  await git(['config', 'core.fsmonitor', `touch ${path.join(f.root, 'M')}`], other);
  await git(['config', 'core.pager', `touch ${path.join(f.root, 'M')}`], other);
  await git(['config', 'alias.st', `!touch ${path.join(f.root, 'M')}`], other);
  await writeFile(path.join(f.root, 'a.txt'), 'x');
  return f;
}

describe('the reviewer profile runs read-only git only', () => {
  it.each([
    "git -c alias.x='!touch a && touch b' x",
    "git -c alias.x='!touch M' x",
    'git --config-env=alias.x=X x',
    'git -C other status',
    'git -C other st',
    'git --git-dir=other/.git --work-tree=other status',
    "git -c core.fsmonitor='touch M' status",
    "git -c core.pager='touch M' -p log",
    "git -c diff.external='touch M' diff --ext-diff HEAD",
    'git --exec-path=. status',
    'git log --output=M',
    'git log --outp=M',
    'git show --output=M',
    "git grep -O'touch M' x",
    'git config alias.y "!touch M"',
    'git push',
    'git commit --allow-empty -m x',
    'git status && touch M',
    'git status; touch M',
  ])('%s asks (and with nobody to answer, never runs)', async (command) => {
    const f = await reviewer();
    expect(await codeOf(f.session.call('run_command', { command }))).toBe('PERMISSION_DENIED');
    for (const marker of ['a', 'b', 'M']) expect(existsSync(path.join(f.root, marker))).toBe(false);
    expect(f.asked().length).toBe(1);
  });

  it.each(['git status', 'git log --oneline', 'git diff HEAD', 'git show HEAD --stat', 'git --version'])(
    '%s runs without a prompt',
    async (command) => {
      const f = await reviewer();
      const r = (await f.session.call('run_command', { command })) as { exitCode: number };
      expect(r.exitCode).toBe(0);
      expect(f.asked()).toEqual([]);
    },
  );
});
