import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { BUILT_CLI } from '../../helpers/cli.js';

/**
 * One project, several honest state folders (another XDG_STATE_HOME, another user as with sudo): calls
 * from each keep working, `audit verify` names the other folders' records, and a cut or a rewrite is
 * still caught by the folder whose head covers it. Judged by marker files and exit codes.
 */

const isRoot = process.getuid?.() === 0;

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the CLI integration tests');
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

interface Folder {
  /** A granted `touch <name>` in the project: exit code (the marker says whether it ran). */
  touch: (name: string) => Promise<Run>;
  verify: (json?: boolean) => Promise<Run>;
}

async function project(): Promise<{ root: string; base: string }> {
  const base = await mkdtemp(path.join(tmpdir(), 'capsule-writers-'));
  await chmod(base, 0o755);
  const root = path.join(base, 'project');
  await mkdir(root);
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
  return { root, base };
}

async function folder(root: string, base: string, name: string, uid = 0): Promise<Folder> {
  const state = path.join(base, `state-${name}`);
  const home = path.join(base, `home-${name}`);
  await mkdir(state);
  await mkdir(home);
  if (uid !== 0) for (const p of [state, home]) await chown(p, uid, uid);
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, XDG_STATE_HOME: state };
  const run = async (args: string[]): Promise<Run> => {
    const argv = ['node', BUILT_CLI, ...args];
    const r =
      uid === 0
        ? await execa(argv[0] as string, argv.slice(1), { cwd: root, env, reject: false, input: '' })
        : await execa(
            'setpriv',
            ['--reuid', String(uid), '--regid', String(uid), '--clear-groups', ...argv],
            {
              cwd: root,
              env,
              reject: false,
              input: '',
            },
          );
    return { code: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  return {
    touch: (marker) => run(['exec', '--grant', 'run_command:touch', '--no-prompt', '--', `touch ${marker}`]),
    verify: (json = false) => run(['audit', 'verify', ...(json ? ['--json'] : [])]),
  };
}

async function logLines(root: string): Promise<string[]> {
  return (await readFile(path.join(root, '.capsule', 'audit.jsonl'), 'utf8')).split('\n').filter((l) => l);
}

describe('an audit log several state folders write to', () => {
  it('A, B, A, B, then both at once: every call runs; verify names the other folder; then a cut and a rewrite are caught', async () => {
    const { root, base } = await project();
    const a = await folder(root, base, 'a');
    const b = await folder(root, base, 'b');
    for (const [i, f] of [a, b, a, b].entries()) {
      const r = await f.touch(`m${i}`);
      expect([i, r.code, r.stderr]).toEqual([i, 0, '']);
      expect(existsSync(path.join(root, `m${i}`))).toBe(true);
    }
    // Concurrent processes from the two folders.
    const runs = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).touch(`c${i}`)));
    expect(runs.map((r) => r.code)).toEqual([0, 0, 0, 0, 0, 0]);
    for (let i = 0; i < 6; i++) expect(existsSync(path.join(root, `c${i}`))).toBe(true);
    const va = await a.verify();
    expect(va.code, va.stderr).toBe(0);
    expect(va.stdout).toContain('records written from other state folders');
    expect(va.stdout).toContain('not tampering');
    const vb = JSON.parse((await b.verify(true)).stdout) as { ok: boolean; foreign: unknown[] };
    expect(vb.ok).toBe(true);
    expect(vb.foreign.length).toBeGreaterThan(0);

    // A cut: the last two records go (one of them is surely the folder that wrote last; find it).
    const lines = await logLines(root);
    await writeFile(path.join(root, '.capsule', 'audit.jsonl'), `${lines.slice(0, -2).join('\n')}\n`);
    const verdicts = [await a.verify(), await b.verify()];
    expect(verdicts.some((v) => v.code === 1 && v.stderr.includes('truncated'))).toBe(true);
    const cutBy = verdicts[0]?.code === 1 ? a : b;
    const after = await cutBy.touch('after-cut');
    expect(after.code).not.toBe(0);
    expect(existsSync(path.join(root, 'after-cut'))).toBe(false);
    expect(after.stderr).toContain('capsule audit reset');
    expect(after.stderr).toContain('A person chooses');

    // Put back, then a rewrite of an early record: both heads cover it.
    await writeFile(path.join(root, '.capsule', 'audit.jsonl'), `${lines.join('\n')}\n`);
    expect((await a.verify()).code).toBe(0);
    expect((await b.verify()).code).toBe(0);
    const edited = [...lines];
    edited[2] = (edited[2] as string).replace('"decision":"allow"', '"decision":"deny"');
    expect(edited[2]).not.toBe(lines[2]);
    await writeFile(path.join(root, '.capsule', 'audit.jsonl'), `${edited.join('\n')}\n`);
    expect((await a.verify()).code).toBe(1);
    expect((await b.verify()).code).toBe(1);
    expect((await a.touch('after-rewrite')).code).not.toBe(0);
    expect(existsSync(path.join(root, 'after-rewrite'))).toBe(false);
  }, 180_000);

  it.runIf(isRoot)(
    'an ordinary user and root (as with sudo) take turns on one project, either first',
    async () => {
      for (const rootFirst of [false, true]) {
        const { root, base } = await project();
        await chown(root, 65534, 65534);
        await chmod(root, 0o777); // root confined on the host has no power over files it does not own
        const user = await folder(root, base, 'user', 65534);
        const sudo = await folder(root, base, 'root', 0);
        const turns = rootFirst ? [sudo, user, sudo, user] : [user, sudo, user, sudo];
        for (const [i, f] of turns.entries()) {
          const r = await f.touch(`u${i}`);
          expect([rootFirst, i, r.code, r.stderr]).toEqual([rootFirst, i, 0, '']);
          expect(existsSync(path.join(root, `u${i}`))).toBe(true);
        }
        expect((await user.verify()).code).toBe(0);
        expect((await sudo.verify()).code).toBe(0);
      }
    },
    120_000,
  );
});
