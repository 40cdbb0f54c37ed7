import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { cli } from '../../helpers/cli.js';

// A user's mistake is never exit 70 ("a bug in capsule"): each of these once was. The exit code is the
// documented one (docs/cli.md), the message names the flag or file, and nothing is half-written.
let root: string;

beforeAll(async () => {
  const project = await tempProject('capsule-user-errors-');
  root = project.root;
  await writeFile(path.join(root, 'capsule.json'), '{}\n');
  await writeCapability(project.capRoot, 'ok', {}, { 'run.sh': 'echo "{}"\n' });
  await writeFile(path.join(project.capRoot, 'ok', 'cases.json'), JSON.stringify([{ input: {} }]));
  await mkdir(path.join(root, 'a-folder'));
});

const CASES: { args: (root: string) => string[]; code: number; names: RegExp }[] = [
  {
    args: (r) => ['ci', '--junit', path.join(r, 'missing', 'dir', 'j.xml'), '--grant', 'run_capability:ok'],
    code: 66,
    names: /--junit/,
  },
  { args: (r) => ['ci', '--junit', path.join(r, 'a-folder')], code: 64, names: /--junit .*a folder/ },
  {
    args: (r) => ['compare', 'ok', '--env', 'shell', '--html', path.join(r, 'missing', 'x.html')],
    code: 66,
    names: /--html/,
  },
  { args: (r) => ['audit', 'verify', '--file', path.join(r, 'a-folder')], code: 66, names: /--file/ },
  { args: (r) => ['audit', 'verify', '--file', path.join(r, 'no-such.jsonl')], code: 66, names: /--file/ },
  { args: (r) => ['wasm', 'run', path.join(r, 'a-folder')], code: 66, names: /a-folder is a folder/ },
];

describe('user mistakes get their documented exit code, never 70', () => {
  it.each(CASES.map((c) => [c.args('<root>').join(' '), c] as const))('capsule %s', async (_, c) => {
    const r = await cli(c.args(root), { cwd: root });
    expect(r.stderr).not.toMatch(/internal error|This is a bug/);
    expect(r.stderr).toMatch(c.names);
    expect(r.code).toBe(c.code);
  });

  it('a --junit folder that does not exist is refused before any check runs (no report, no run)', async () => {
    const marker = path.join(root, 'ran');
    const project = path.join(root, 'capabilities');
    await writeCapability(project, 'marks', {}, { 'run.sh': `touch ${marker}\necho "{}"\n` });
    await writeFile(path.join(project, 'marks', 'cases.json'), JSON.stringify([{ input: {} }]));
    const r = await cli(
      ['ci', '--junit', path.join(root, 'nope', 'j.xml'), '--grant', 'run_capability:marks'],
      {
        cwd: root,
      },
    );
    expect(r.code).toBe(66);
    expect(existsSync(marker)).toBe(false);
  });

  it.each([
    ['state', 'XDG_STATE_HOME'],
    ['cache', 'XDG_CACHE_HOME'],
  ])(
    'a per-user %s folder that cannot be made is named with the variable that moves it (78)',
    async (what, variable) => {
      const file = path.join(root, `a-file-${what}`);
      await writeFile(file, '');
      const env = { ...process.env, CAPSULE_STATE_DIR: undefined, [variable]: path.join(file, 'below') };
      const marker = path.join(root, `ran-${what}`);
      await writeCapability(
        path.join(root, 'capabilities'),
        `marks-${what}`,
        {},
        {
          'run.sh': `touch ${marker}\necho "{}"\n`,
        },
      );
      const r = await cli(['run', `marks-${what}`, '--grant', `run_capability:marks-${what}`], {
        cwd: root,
        env,
      });
      expect(r.stderr).not.toMatch(/internal error|This is a bug/);
      expect(r.stderr).toContain(path.join(file, 'below'));
      expect(r.stderr).toContain(variable);
      expect(r.code).toBe(78);
      expect(existsSync(marker)).toBe(false);
    },
  );
});
