import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { builtCli } from '../../helpers/cli.js';
import { componentizeJs } from '../../../src/runners/wasm/componentize.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import type { DirGrant } from '../../../src/runners/wasm/dir-grants.js';
import { assemble, FIXTURES } from '../runners/wasm/helpers.js';

// Attacks on links and renames between two grants: a module given a ro grant and a rw grant (or two rw
// grants) tries to give a file of one a second name in the other (path_link / linkAt), or to move it
// there (path_rename / renameAt). Judged by effect: every host file's bytes and link count, and the
// names in both folders, are what they were before the run.

const runner = new WasmRunner({ poolSize: 1 });
afterAll(() => runner.close());
const probe = assemble('probe.wat');
let fsprobe: Uint8Array;
beforeAll(async () => {
  const source = readFileSync(new URL('fsprobe/fsprobe.js', FIXTURES), 'utf8');
  fsprobe = (await componentizeJs(source, { file: 'fsprobe.js' })).component;
}, 60_000);

const XDEV = 75;
const ROFS = 69;
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

type Mode = 'ro' | 'rw';

/** Every entry under `dir` with its bytes (files), target (symlinks) and link count. */
function snapshot(dir: string, prefix = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, e.name);
    const rel = `${prefix}${e.name}`;
    const st = lstatSync(full);
    if (e.isDirectory()) {
      out[`${rel}/`] = `dir nlink=${st.nlink}`;
      Object.assign(out, snapshot(full, `${rel}/`));
    } else out[rel] = `nlink=${st.nlink} ${readFileSync(full, 'utf8')}`;
  }
  return out;
}

async function twoGrants(): Promise<{ a: string; b: string }> {
  const base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-redteam-links-')));
  const a = path.join(base, 'a');
  const b = path.join(base, 'b');
  await mkdir(path.join(a, 'sub'), { recursive: true });
  await mkdir(b);
  await writeFile(path.join(a, 'secret.txt'), 'the person granted this file\n');
  await writeFile(path.join(a, 'sub', 'deep.txt'), 'deeper\n');
  await writeFile(path.join(b, 'mine.txt'), 'the other grant\n');
  return { a, b };
}

const grants = (a: string, am: Mode, b: string, bm: Mode): DirGrant[] => [
  { hostPath: a, guestPath: '/a', mode: am },
  { hostPath: b, guestPath: '/b', mode: bm },
];

const runProbe = (args: string[], dirs: DirGrant[]): ReturnType<WasmRunner['runRaw']> =>
  runner.runRaw({
    file: 'probe.wasm',
    bytes: probe,
    programName: 'probe',
    args,
    env: {},
    input: Buffer.alloc(0),
    dirs,
    timeoutMs: 10_000,
    memoryMb: 16,
    outputBytes: 64 * 1024,
  });

// [mode of fd 3's grant, mode of fd 4's grant, errno a link gets, errno a rename gets]: a change into a
// ro grant is read-only before it is anything else; every other pair is two grants (cross-device).
const PAIRS: Array<[Mode, Mode, number, number]> = [
  ['ro', 'rw', XDEV, ROFS],
  ['rw', 'ro', ROFS, ROFS],
  ['rw', 'rw', XDEV, XDEV],
];

describe('red team: preview1 links and renames between two grants', () => {
  it.each(PAIRS)(
    '%s -> %s: path_link and path_rename are refused, both folders unchanged',
    async (am, bm, linkErrno, renameErrno) => {
      const { a, b } = await twoGrants();
      const before = { a: snapshot(a), b: snapshot(b) };
      const dirs = grants(a, am, b, bm);
      for (const [args, errno] of [
        [['Link', 'secret.txt', 'hl'], linkErrno],
        [['Link', 'sub/deep.txt', 'hl2'], linkErrno],
        [['Nmv', 'secret.txt', 'moved'], renameErrno],
        [['Nmv', 'sub', 'moved-dir'], renameErrno],
      ] as Array<[string[], number]>) {
        const r = await runProbe(args, dirs);
        expect(text(r.stderr), args.join(' ')).toBe(`errno=${errno}\n`);
      }
      expect({ a: snapshot(a), b: snapshot(b) }).toEqual(before);
    },
  );

  it('control: the same module links and renames within one rw grant (allowed, see docs/runners.md)', async () => {
    const { a, b } = await twoGrants();
    const dirs = grants(a, 'rw', b, 'rw');
    expect((await runProbe(['hlink', 'secret.txt', 'hl'], dirs)).exitCode).toBe(0);
    expect(lstatSync(path.join(a, 'hl')).nlink).toBe(2);
    expect((await runProbe(['nmv', 'sub/deep.txt', 'deep.txt'], dirs)).exitCode).toBe(0);
    expect(readFileSync(path.join(a, 'deep.txt'), 'utf8')).toBe('deeper\n');
    expect(snapshot(b)).toEqual({ 'mine.txt': 'nlink=1 the other grant\n' });
  });
});

describe('red team: component links and renames between two grants', () => {
  it.each(PAIRS)('%s -> %s: linkAt and renameAt are refused, both folders unchanged', async (am, bm) => {
    const { a, b } = await twoGrants();
    const before = { a: snapshot(a), b: snapshot(b) };
    const ops = [
      { op: 'link', pre: '/a', from: 'secret.txt', toPre: '/b', to: 'hl' },
      { op: 'link', pre: '/b', from: 'mine.txt', toPre: '/a', to: 'hl' },
      { op: 'rename', pre: '/a', from: 'secret.txt', toPre: '/b', to: 'moved' },
      { op: 'rename', pre: '/b', from: 'mine.txt', toPre: '/a', to: 'moved' },
    ];
    const r = await runner.runRaw({
      file: 'fsprobe.wasm',
      bytes: fsprobe,
      programName: 'fsprobe',
      args: [],
      env: {},
      input: Buffer.from(JSON.stringify({ ops })),
      dirs: grants(a, am, b, bm),
      timeoutMs: 10_000,
      memoryMb: 64,
      outputBytes: 64 * 1024,
    });
    expect(r.exitCode, text(r.stderr)).toBe(0);
    const out = JSON.parse(text(r.stdout)) as Array<{ ok?: string; err?: string }>;
    expect(out).toHaveLength(4);
    for (const o of out) {
      expect(o.ok).toBeUndefined();
      expect(['cross-device', 'read-only', 'not-permitted']).toContain(o.err);
    }
    expect({ a: snapshot(a), b: snapshot(b) }).toEqual(before);
  });
});

describe('red team: a ro grant inside a rw grant', () => {
  async function nested(grants: unknown[], args: string[]): Promise<{ root: string; code: number }> {
    const { root, capRoot } = await tempProject('capsule-redteam-nested-');
    await writeFile(path.join(root, 'capsule.json'), '{}\n');
    await mkdir(path.join(root, 'data', 'sub'), { recursive: true });
    await writeFile(path.join(root, 'data', 'sub', 'x.txt'), 'granted read-only\n');
    await writeCapability(
      capRoot,
      'probe',
      {
        description: 'red team',
        environment: 'wasm',
        entry: 'probe.wasm',
        interpreter: undefined,
        args,
        grants: { fs: grants },
      },
      { 'probe.wasm': probe },
    );
    const r = await builtCli(['run', 'probe', '--grant', 'run_capability:probe'], { cwd: root });
    return { root, code: r.code };
  }

  it('is refused at load: the guest can neither write nor link its files through the rw grant', async () => {
    const grants = [
      { path: 'data', mode: 'rw' },
      { path: 'data/sub', mode: 'ro' },
    ];
    for (const args of [
      ['write', 'sub/x.txt'],
      ['hlink', 'sub/x.txt', 'hl'],
    ]) {
      for (const order of [grants, [...grants].reverse()]) {
        const { root, code } = await nested(order, args);
        expect(code, args.join(' ')).not.toBe(0);
        expect(readFileSync(path.join(root, 'data', 'sub', 'x.txt'), 'utf8')).toBe('granted read-only\n');
        expect(lstatSync(path.join(root, 'data', 'sub', 'x.txt')).nlink).toBe(1);
      }
    }
    // The control: with the rw grant alone (what the nested ro one never narrowed), the write lands.
    const { root, code } = await nested([grants[0]], ['write', 'sub/x.txt']);
    expect(code).toBe(0);
    expect(readFileSync(path.join(root, 'data', 'sub', 'x.txt'), 'utf8')).toBe('pwned');
  });
});
