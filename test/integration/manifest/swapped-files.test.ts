import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';

/**
 * Files of a capability folder swapped underneath capsule while it reads them: a racing process puts a
 * FIFO (whose open blocks until a writer comes), a symlink to /dev/zero (endless) or to a file outside
 * the folder in place of a regular file, over and over. capsule's reads are synchronous (they hold its
 * one thread), so a read that opened the swapped-in FIFO would hang the CLI and the MCP server. Judged by
 * effect: every command ends on its own (an answer or a refusal), and no outside bytes reach the run.
 */

const racers: ResultPromise[] = [];
afterEach(() => {
  for (const r of racers.splice(0)) r.kill('SIGKILL');
});

/**
 * A process that keeps replacing `target` (atomically, by rename from `tmp`, outside the folder on the
 * same filesystem) with each of `sources` in turn.
 */
function race(target: string, tmp: string, sources: readonly string[]): void {
  const script = `
    const fs = require('node:fs');
    const [target, tmp, ...sources] = process.argv.slice(1);
    for (let i = 0; ; i++) {
      const source = sources[i % sources.length];
      try {
        fs.rmSync(tmp, { force: true });
        if (source.startsWith('symlink:')) fs.symlinkSync(source.slice(8), tmp);
        else fs.linkSync(source, tmp);
        fs.renameSync(tmp, target);
      } catch {}
    }`;
  const child = execa(process.execPath, ['-e', script, target, tmp, ...sources], { reject: false });
  racers.push(child);
}

/** The built CLI; a run still going after 20 s is killed and reported as hung. */
async function capsule(cwd: string, args: string[]) {
  const r = await execa(process.execPath, [BUILT_CLI, ...args], {
    cwd,
    reject: false,
    input: '{}',
    timeout: 20_000,
    killSignal: 'SIGKILL',
  });
  return { hung: r.timedOut, code: r.exitCode, stdout: r.stdout, stderr: r.stderr };
}

describe('a capability folder whose files are swapped while capsule reads them', () => {
  it('a manifest swapped for a FIFO never hangs a scan or a run', async () => {
    const { root, capRoot } = await tempProject('capsule-swap-');
    const dir = await writeCapability(capRoot, 'swapped', {}, { 'run.sh': 'echo ran\n' });
    // Both sources live outside the folder, on the same filesystem (hard links), so the folder only
    // ever holds capability.json as the racer leaves it.
    const spare = path.join(root, 'spare');
    await mkdir(spare);
    execFileSync('cp', [path.join(dir, 'capability.json'), path.join(spare, 'manifest')]);
    execFileSync('mkfifo', [path.join(spare, 'fifo')]);
    race(path.join(dir, 'capability.json'), path.join(spare, 'swap'), [
      path.join(spare, 'manifest'),
      path.join(spare, 'fifo'),
    ]);
    for (let i = 0; i < 30; i++) {
      const r = await capsule(
        root,
        i % 2 === 0 ? ['list'] : ['run', 'swapped', '--grant', 'run_capability:swapped', '--no-prompt'],
      );
      expect(r.hung, `capsule ${i % 2 === 0 ? 'list' : 'run'} hung on a FIFO manifest`).toBe(false);
    }
  }, 300_000);

  it('an entry swapped for a FIFO, /dev/zero or an outside file never hangs a run nor gives it outside bytes', async () => {
    const { root, capRoot } = await tempProject('capsule-swap-');
    const dir = await writeCapability(
      capRoot,
      'swapped',
      {},
      { 'run.sh': 'cat data.txt\n', 'data.txt': 'inside\n' },
    );
    const spare = path.join(root, 'spare');
    await mkdir(spare);
    await writeFile(path.join(spare, 'data'), 'inside\n');
    await writeFile(path.join(spare, 'secret'), 'OUTSIDE-SECRET\n');
    execFileSync('mkfifo', [path.join(spare, 'fifo')]);
    race(path.join(dir, 'data.txt'), path.join(spare, 'swap'), [
      path.join(spare, 'data'),
      path.join(spare, 'fifo'),
      'symlink:/dev/zero',
      `symlink:${path.join(spare, 'secret')}`,
    ]);
    for (let i = 0; i < 30; i++) {
      const r = await capsule(root, ['run', 'swapped', '--grant', 'run_capability:swapped', '--no-prompt']);
      expect(r.hung, 'capsule run hung on a swapped file').toBe(false);
      expect(r.stdout).not.toContain('OUTSIDE-SECRET');
    }
  }, 300_000);
});
