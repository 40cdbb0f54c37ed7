import { mkdtemp, readFile, realpath, symlink, copyFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../helpers/cli.js';

/** The lines of the README's tour block, each with the exit code its comment states (0 when none). */
function tourLines(readme: string): Array<{ line: string; exit: number }> {
  const start = readme.indexOf('```sh', readme.indexOf('## A 60-second tour'));
  const block = readme.slice(start + 6, readme.indexOf('\n```', start + 6));
  return block
    .split('\n')
    .filter((l) => l.trim() !== '' && !l.startsWith('#'))
    .map((line) => ({ line, exit: Number(/ # exit (\d+):/.exec(line)?.[1] ?? 0) }));
}

let clone: string;
let stateDir: string;

/** One README line in bash, in the clone, after the tour's own alias line. */
async function sh(line: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const r = await execa('bash', ['-c', `shopt -s expand_aliases\n${alias}\n${line}`], {
    cwd: clone,
    reject: false,
    stdin: 'ignore',
    env: { ...process.env, CAPSULE_STATE_DIR: stateDir },
    timeout: 240_000,
  });
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}
let alias = '';

describe('the README tour, line by line in a fresh clone', () => {
  beforeAll(async () => {
    const base = await realpath(await mkdtemp(path.join(tmpdir(), 'capsule-tour-')));
    clone = path.join(base, 'capsule');
    stateDir = path.join(base, 'state');
    await execa('git', ['clone', '--quiet', REPO_ROOT, clone]);
    // The README under test is the working tree's; the build and dependencies are reused (no npm ci).
    await copyFile(path.join(REPO_ROOT, 'README.md'), path.join(clone, 'README.md'));
    await symlink(await realpath(path.join(REPO_ROOT, 'node_modules')), path.join(clone, 'node_modules'));
    await symlink(path.join(REPO_ROOT, 'dist'), path.join(clone, 'dist'));
  }, 120_000);

  it('runs every command as printed, each with the exit code its comment states', async () => {
    const lines = tourLines(await readFile(path.join(clone, 'README.md'), 'utf8'));
    expect(lines.length).toBeGreaterThan(15);
    for (const { line, exit } of lines) {
      if (line === 'npm run build') continue; // dist is the checkout's, built already
      if (line.startsWith('alias capsule=')) {
        alias = line;
        continue;
      }
      expect(alias, 'the alias comes before the commands').not.toBe('');
      const r = await sh(line);
      expect(r.code, `${line}\n${r.stderr.slice(0, 2000)}`).toBe(exit);
    }
  }, 600_000);

  for (const env of ['wasm', 'shell', 'docker']) {
    it(`capsule new --env ${env} prints a "run it:" line that works when pasted`, async () => {
      alias ||= 'alias capsule="node $PWD/dist/cli/main.js"';
      const name = `tour-${env}`;
      const made = await sh(`capsule new ${name} --env ${env}`);
      expect(made.code, made.stderr).toBe(0);
      const runIt = /^run it: (.*)$/m.exec(made.stdout)?.[1];
      expect(runIt, made.stdout).toMatch(new RegExp(`^capsule run ${name} `));
      const r = await sh(runIt as string);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toEqual({ received: { hello: 'world' } });
    }, 240_000);
  }
});
