import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject } from '../../helpers/capability.js';

/** A git repository with one commit and an empty capsule.json. */
async function repo(): Promise<string> {
  const { root } = await tempProject('capsule-redteam-grant-');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
  const git = (args: string[]) => execa('git', args, { cwd: root });
  await git(['init', '-q']);
  await git(['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '--allow-empty', '-m', 'x']);
  return root;
}

describe('a grant of git does not cover a git option that writes a file it names (short forms too)', () => {
  it.each(['git archive -o M HEAD', 'git archive -oM HEAD', 'git format-patch -o M -1'])(
    '%s',
    async (command) => {
      const root = await repo();
      const r = await cli(['exec', '--no-prompt', '--grant', 'run_command:git', '--', command], {
        cwd: root,
      });
      expect(existsSync(path.join(root, 'M')), r.stderr).toBe(false);
      expect(r.code).toBe(77);
    },
  );

  it('the same grant still runs git archive without -o', async () => {
    const root = await repo();
    const r = await cli(['exec', '--no-prompt', '--grant', 'run_command:git', '--', 'git archive --list'], {
      cwd: root,
    });
    expect(r.code, r.stderr).toBe(0);
  });
});

describe('a grant of a package manager does not cover the shell code its exec runs', () => {
  it.each(["npm exec -c 'touch M'", "npm x -c 'touch M'", "npm exec --call='touch M'"])(
    '%s',
    async (command) => {
      const root = await repo();
      const r = await cli(['exec', '--no-prompt', '--grant', 'run_command:npm', '--', command], {
        cwd: root,
      });
      expect(existsSync(path.join(root, 'M')), r.stderr).toBe(false);
      expect(r.code).toBe(77);
    },
  );

  it('the same grant still runs npm itself', async () => {
    const root = await repo();
    const r = await cli(['exec', '--no-prompt', '--grant', 'run_command:npm', '--', 'npm --version'], {
      cwd: root,
    });
    expect(r.code, r.stderr).toBe(0);
  });
});
