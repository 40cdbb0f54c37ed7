import {
  closeSync,
  existsSync,
  lstatSync,
  openSync,
  readFileSync,
  readdirSync,
  renameSync,
  statSync,
  writeSync,
} from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isCapsuleError } from '../../../../src/base/errors.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import type { WasmRawResult, WasmRunSpec } from '../../../../src/runners/wasm/wasm-runner.js';
import type { DirGrant } from '../../../../src/runners/wasm/dir-grants.js';
import { tempProject } from '../../../helpers/capability.js';
import { assemble } from './helpers.js';

// The preview1 guest works on the granted folders themselves (no copy): every escape the copies
// used to stop must be stopped by the confined resolver, judged by effect on the host.

const probe = assemble('probe.wat');
let cacheDir: string;
let runner: WasmRunner;
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

let root: string;
let data: string;
let other: string;
const grant = (hostPath: string, guestPath: string, mode: 'ro' | 'rw'): DirGrant => ({
  hostPath,
  guestPath,
  mode,
});

function run(args: string[], dirs: DirGrant[], extra: Partial<WasmRunSpec> = {}): Promise<WasmRawResult> {
  return runner.runRaw({
    file: 'probe.wasm',
    bytes: probe,
    programName: 'probe',
    args,
    env: {},
    input: new Uint8Array(0),
    dirs,
    timeoutMs: 10_000,
    memoryMb: 16,
    outputBytes: 1024 * 1024,
    ...extra,
  });
}

beforeAll(async () => {
  cacheDir = await mkdtemp(path.join(os.tmpdir(), 'capsule-wasm-cache-'));
  runner = new WasmRunner({ poolSize: 1, cacheDir });
  ({ root } = await tempProject('capsule-wasm-inplace-'));
  data = path.join(root, 'data');
  other = path.join(root, 'other');
  await mkdir(path.join(data, 'sub'), { recursive: true });
  await mkdir(other);
  await writeFile(path.join(data, 'hello.txt'), 'hello\n');
  await writeFile(path.join(data, 'sub', 'deep.txt'), 'deep\n');
  await writeFile(path.join(root, 'secret.txt'), 'TOP SECRET\n');
  await symlink(path.join(root, 'secret.txt'), path.join(data, 'secret-link'));
});

afterAll(async () => {
  await runner.close();
  await rm(cacheDir, { recursive: true, force: true });
});

describe('guest-made symlinks', () => {
  it('a guest may make and follow a symlink that stays inside its preopen', async () => {
    const rw = [grant(data, '/data', 'rw')];
    expect((await run(['link', 'sub/deep.txt', 'mine'], rw)).exitCode).toBe(0);
    expect(lstatSync(path.join(data, 'mine')).isSymbolicLink()).toBe(true);
    expect(text((await run(['read', 'mine'], rw)).stdout)).toBe('deep\n');
    expect(text((await run(['kread', 'mine'], rw)).stdout)).toBe('sub/deep.txt');
    expect((await run(['link', 'deep.txt', 'sub/again'], rw)).exitCode).toBe(0);
    expect(text((await run(['read', 'sub/again'], rw)).stdout)).toBe('deep\n');
  });

  it.each([
    ['an absolute target', '/etc/passwd'],
    ['a target above the preopen', '../secret.txt'],
    ['.. hidden after a component', 'sub/../../secret.txt'],
  ])(
    'refuses %s at creation: nothing is left in the host folder for a host tool to follow',
    async (_how, target) => {
      const r = await run(['link', target, 'escape'], [grant(data, '/data', 'rw')]);
      expect(text(r.stderr)).toBe('errno=76\n');
      expect(lstatSync(path.join(data, 'escape'), { throwIfNoEntry: false })).toBeUndefined();
    },
  );

  it('refuses a .. target even when it is inside when made: composed with a second link it would lead host tools out', async () => {
    const rw = [grant(data, '/data', 'rw')];
    // sub/up -> .. is the grant itself; x -> sub/up/.. would then be the grant's parent for any host tool.
    expect(text((await run(['link', '..', 'sub/up'], rw)).stderr)).toBe('errno=76\n');
    expect(text((await run(['link', 'sub/up/..', 'x'], rw)).stderr)).toBe('errno=76\n');
    expect(lstatSync(path.join(data, 'sub', 'up'), { throwIfNoEntry: false })).toBeUndefined();
    expect(lstatSync(path.join(data, 'x'), { throwIfNoEntry: false })).toBeUndefined();
  });

  it('refuses symlink creation in a read-only preopen', async () => {
    const r = await run(['link', 'hello.txt', 'ro-link'], [grant(data, '/data', 'ro')]);
    expect(text(r.stderr)).toBe('errno=69\n');
    expect(lstatSync(path.join(data, 'ro-link'), { throwIfNoEntry: false })).toBeUndefined();
  });
});

describe('hard links and renames', () => {
  it('cannot hard-link a file from outside, directly or through a planted symlink', async () => {
    const rw = [grant(data, '/data', 'rw')];
    expect(text((await run(['hlink', '../secret.txt', 'stolen'], rw)).stderr)).toBe('errno=76\n');
    expect(text((await run(['Hlink', 'secret-link', 'stolen'], rw)).stderr)).toBe('errno=76\n');
    expect(lstatSync(path.join(data, 'stolen'), { throwIfNoEntry: false })).toBeUndefined();
    // Without following, the new name is a link to the link (the same symlink), still refused on use.
    expect((await run(['hlink', 'secret-link', 'stolen2'], rw)).exitCode).toBe(0);
    expect(lstatSync(path.join(data, 'stolen2')).isSymbolicLink()).toBe(true);
    const r = await run(['read', 'stolen2'], rw);
    expect(text(r.stdout)).not.toMatch(/TOP SECRET/);
    expect(text(r.stderr)).toBe('errno=76\n');
    expect(statSync(path.join(root, 'secret.txt')).nlink).toBe(1);
  });

  it('renames within one preopen, never across two (EXDEV), out of them, or out of or into a ro one', async () => {
    await writeFile(path.join(data, 'move-me.txt'), 'moving');
    const both = [grant(data, '/data', 'rw'), grant(other, '/other', 'rw')];
    expect(text((await run(['Nmv', 'move-me.txt', 'moved.txt'], both)).stderr)).toBe('errno=75\n');
    expect(existsSync(path.join(other, 'moved.txt'))).toBe(false);
    expect((await run(['nmv', 'move-me.txt', 'moved.txt'], both)).exitCode).toBe(0);
    expect(readFileSync(path.join(data, 'moved.txt'), 'utf8')).toBe('moving');
    expect(existsSync(path.join(data, 'move-me.txt'))).toBe(false);
    expect(text((await run(['nmv', 'hello.txt', '../hello.txt'], both)).stderr)).toBe('errno=76\n');
    expect(text((await run(['Nmv', 'hello.txt', '../hello.txt'], both)).stderr)).toBe('errno=75\n');
    expect(existsSync(path.join(root, 'hello.txt'))).toBe(false);
    // Into a ro preopen, and out of one: EROFS, both folders unchanged.
    const intoRo = [grant(data, '/data', 'rw'), grant(other, '/other', 'ro')];
    expect(text((await run(['Nmv', 'hello.txt', 'h.txt'], intoRo)).stderr)).toBe('errno=69\n');
    const outOfRo = [grant(data, '/data', 'ro'), grant(other, '/other', 'rw')];
    expect(text((await run(['Nmv', 'hello.txt', 'h.txt'], outOfRo)).stderr)).toBe('errno=69\n');
    expect(readFileSync(path.join(data, 'hello.txt'), 'utf8')).toBe('hello\n');
    expect(existsSync(path.join(other, 'h.txt'))).toBe(false);
  });
});

describe('creating through planted links', () => {
  it('never creates a file where a planted (dangling) link points out, with or without O_EXCL', async () => {
    const target = path.join(root, 'created-outside.txt');
    await symlink(target, path.join(data, 'dangling-abs'));
    await symlink('../created-outside-rel.txt', path.join(data, 'dangling-rel'));
    const rw = [grant(data, '/data', 'rw')];
    for (const name of ['dangling-abs', 'dangling-rel']) {
      const r = await run(['write', name], rw);
      expect(r.exitCode, name).not.toBe(0);
    }
    expect(existsSync(target)).toBe(false);
    expect(existsSync(path.join(root, 'created-outside-rel.txt'))).toBe(false);
  });
});

describe('where the preopen is', () => {
  it('a preopen at guest / still confines to the grant', async () => {
    const atRoot = [grant(data, '/', 'ro')];
    expect(text((await run(['preopen'], atRoot)).stdout)).toBe('/');
    expect(text((await run(['read', 'hello.txt'], atRoot)).stdout)).toBe('hello\n');
    for (const p of [
      '/etc/passwd',
      '../secret.txt',
      '../../../../etc/passwd',
      'secret-link',
      `${root}/secret.txt`,
    ]) {
      const r = await run(['read', p], atRoot);
      expect(text(r.stdout), p).not.toMatch(/root:|TOP SECRET/);
      expect(r.exitCode, p).not.toBe(0);
    }
  });

  it('refuses a grant that is itself a symlink (the guest never runs)', async () => {
    const link = path.join(root, 'grant-link');
    await symlink(root, link);
    const err = await run(['write', 'planted.txt'], [grant(link, '/data', 'rw')]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isCapsuleError(err)).toBe(true);
    expect(existsSync(path.join(root, 'planted.txt'))).toBe(false);
  });

  it('never shows capsule state inside a grant, nor lets a guest make it', async () => {
    await writeFile(path.join(data, 'capsule.json'), '{"mode":"trusted"}');
    const rw = [grant(data, '/data', 'rw')];
    const r = await run(['read', 'capsule.json'], rw);
    expect(text(r.stderr)).toBe('errno=44\n');
    expect(text(r.stdout)).toBe('');
    expect((await run(['write', '.capsule-x'], rw)).exitCode).not.toBe(0);
    expect((await run(['dir', '.capsule'], rw)).exitCode).not.toBe(0);
    expect(existsSync(path.join(data, '.capsule-x'))).toBe(false);
    expect(existsSync(path.join(data, '.capsule'))).toBe(false);
    expect(readFileSync(path.join(data, 'capsule.json'), 'utf8')).toBe('{"mode":"trusted"}');
  });
});

describe('the grant itself, concurrently and at size', () => {
  it('TOCTOU: a host swapping a directory for a symlink out while the guest reads never leaks', async () => {
    const swap = path.join(root, 'swap');
    const outside = path.join(root, 'outside');
    await mkdir(path.join(swap, 'd'), { recursive: true });
    await writeFile(path.join(swap, 'd', 'f.txt'), 'inside\n');
    await mkdir(outside);
    await writeFile(path.join(outside, 'f.txt'), 'TOP SECRET\n');
    await symlink(outside, path.join(swap, 'link'));
    await mkdir(path.join(swap, 'real'));
    const grants = [grant(swap, '/swap', 'ro')];
    let swapping = true;
    let swaps = 0;
    // Host side: flip `d` between the real directory and the link out, as fast as it can.
    const flipper = (async () => {
      while (swapping) {
        renameSync(path.join(swap, 'd'), path.join(swap, 'real', 'd'));
        renameSync(path.join(swap, 'link'), path.join(swap, 'd'));
        renameSync(path.join(swap, 'd'), path.join(swap, 'link'));
        renameSync(path.join(swap, 'real', 'd'), path.join(swap, 'd'));
        swaps++;
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    })();
    const outs: string[] = [];
    try {
      for (let i = 0; i < 40; i++) outs.push(text((await run(['read', 'd/f.txt'], grants)).stdout));
    } finally {
      swapping = false;
      await flipper;
    }
    expect(swaps).toBeGreaterThan(0);
    expect(outs.join('')).not.toMatch(/TOP SECRET/);
  });

  it('a 1 GiB granted folder is used in place: the guest reads the last byte the host wrote, no copy is made', async () => {
    const big = path.join(root, 'big');
    await mkdir(big);
    const file = path.join(big, 'huge.bin');
    await truncate(await writeFile(file, '').then(() => file), 1024 ** 3);
    const fd = openSync(file, 'r+');
    writeSync(fd, 'Z', 1024 ** 3 - 1);
    closeSync(fd);
    const tmpBefore = new Set(readdirSync(os.tmpdir()));
    const r = await run(['tail', 'huge.bin'], [grant(big, '/big', 'ro')]);
    expect(text(r.stdout)).toBe('Z');
    // No copy: nothing of that size anywhere in capsule's cache or new in the temp folder.
    const bigFiles = async (dir: string, depth = 0): Promise<string[]> => {
      const found: string[] = [];
      for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
        const p = path.join(dir, e.name);
        if (e.isDirectory() && depth < 6) found.push(...(await bigFiles(p, depth + 1)));
        else if (e.isFile() && (lstatSync(p, { throwIfNoEntry: false })?.size ?? 0) >= 1024 ** 3)
          found.push(p);
      }
      return found;
    };
    expect(await bigFiles(cacheDir)).toEqual([]);
    const fresh = readdirSync(os.tmpdir()).filter((n) => !tmpBefore.has(n));
    for (const n of fresh) expect(await bigFiles(path.join(os.tmpdir(), n))).toEqual([]);
    // The file's blocks are still the sparse original's (a copy through copyFile would be a new inode).
    expect(statSync(file).blocks * 512).toBeLessThan(1024 * 1024);
  });
});

describe('special files the host left in a grant', () => {
  it('a FIFO planted in a grant cannot pin the worker: the read fails at once, the next call runs', async () => {
    const dir = path.join(root, 'fifo');
    await mkdir(dir);
    execFileSync('mkfifo', [path.join(dir, 'pipe')]);
    const r = await run(['read', 'pipe'], [grant(dir, '/fifo', 'ro')], { timeoutMs: 20_000 });
    expect(r.timedOut).toBe(false);
    expect(r.exitCode).not.toBe(0);
    expect(text((await run(['preopen'], [grant(dir, '/fifo', 'ro')])).stdout)).toBe('/fifo');
  });
});
