import { linkSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { componentizeJs } from '../../../../src/runners/wasm/componentize.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import type { WasmRawResult } from '../../../../src/runners/wasm/wasm-runner.js';
import { assemble, FIXTURES } from './helpers.js';

// A hard link planted in a granted folder names a file that may lie anywhere on the same filesystem
// (outside the grant, capsule's own capsule.json), and no path check can see where. The guest must
// not change such a file: judged by the outside file's bytes, size and times on the host.

const runner = new WasmRunner({ poolSize: 1 });
afterAll(() => runner.close());
const probe = assemble('probe.wat');
let fsprobe: Uint8Array;
beforeAll(async () => {
  const source = readFileSync(new URL('fsprobe/fsprobe.js', FIXTURES), 'utf8');
  fsprobe = (await componentizeJs(source, { file: 'fsprobe.js' })).component;
}, 60_000);

const NOTCAPABLE = 76;
const SECRET = 'outside: {"grants":"untouched"}\n';
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

let grant: string;
let outside: string;
let config: string;
beforeEach(async () => {
  const base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-hlink-')));
  grant = path.join(base, 'grant');
  await mkdir(grant);
  outside = path.join(base, 'secret.txt');
  config = path.join(base, 'capsule.json');
  await writeFile(outside, SECRET);
  await writeFile(config, '{"schemaVersion":1}\n');
  // Planted by the host (or another process) before the run: same inode, a name inside the grant.
  linkSync(outside, path.join(grant, 'linked.txt'));
  linkSync(config, path.join(grant, 'cfg.json'));
});

function unchanged(): void {
  expect(readFileSync(outside, 'utf8')).toBe(SECRET);
  expect(readFileSync(config, 'utf8')).toBe('{"schemaVersion":1}\n');
}

const run = (args: string[], input = ''): Promise<WasmRawResult> =>
  runner.runRaw({
    file: 'probe.wasm',
    bytes: probe,
    programName: 'probe',
    args,
    env: {},
    input: Buffer.from(input),
    dirs: [{ hostPath: grant, guestPath: '/g', mode: 'rw' }],
    timeoutMs: 10_000,
    memoryMb: 16,
    outputBytes: 64 * 1024,
  });

describe('preview1: a hard link in a rw grant to a file outside it', () => {
  it.each([
    ['create+truncate and write', ['write', 'linked.txt']],
    ['copy stdin into it', ['save', 'cfg.json']],
    ['set its size', ['Zsize', 'linked.txt']],
    ['pwrite into it', ['Pwrite', 'cfg.json']],
    ['fill it', ['Fill', 'linked.txt']],
  ])('refuses to %s (NOTCAPABLE): the outside file is unchanged, not even truncated', async (_, args) => {
    const before = statSync(outside).mtimeMs;
    const r = await run(args, 'overwritten');
    expect(text(r.stderr)).toBe(`errno=${NOTCAPABLE}\n`);
    unchanged();
    expect(statSync(outside).mtimeMs).toBe(before);
  });

  it('still reads it (the documented choice: reading shows only what the planter could read)', async () => {
    const r = await run(['read', 'linked.txt']);
    expect(r.exitCode).toBe(0);
    expect(text(r.stdout)).toBe(SECRET);
  });

  it('refuses writing a file the guest itself linked inside the grant; the guest may unlink the name', async () => {
    await writeFile(path.join(grant, 'own.txt'), 'own');
    expect((await run(['hlink', 'own.txt', 'own2.txt'])).exitCode).toBe(0);
    expect(text((await run(['write', 'own2.txt'])).stderr)).toBe(`errno=${NOTCAPABLE}\n`);
    expect(readFileSync(path.join(grant, 'own.txt'), 'utf8')).toBe('own');
    // Removing the planted name leaves the outside file alone, and then the name is free to write.
    expect((await run(['unlink', 'linked.txt'])).exitCode).toBe(0);
    expect((await run(['write', 'linked.txt'])).exitCode).toBe(0);
    expect(readFileSync(path.join(grant, 'linked.txt'), 'utf8')).toBe('pwned');
    unchanged();
  });
});

describe('components: a hard link in a rw grant to a file outside it', () => {
  it('refuses write, append and set-size with not-permitted; reads work; the outside file is unchanged', async () => {
    const r = await runner.runRaw({
      file: 'fsprobe.wasm',
      bytes: fsprobe,
      programName: 'fsprobe',
      args: [],
      env: {},
      input: Buffer.from(
        JSON.stringify({
          ops: [
            { op: 'write', pre: '/g', path: 'linked.txt', text: 'overwritten' },
            { op: 'append', pre: '/g', path: 'cfg.json', text: '{"grants":"widened"}' },
            { op: 'setSize', pre: '/g', path: 'linked.txt', size: 0 },
            { op: 'read', pre: '/g', path: 'linked.txt' },
          ],
        }),
      ),
      dirs: [{ hostPath: grant, guestPath: '/g', mode: 'rw' }],
      timeoutMs: 10_000,
      memoryMb: 64,
      outputBytes: 64 * 1024,
    });
    expect(r.exitCode, text(r.stderr)).toBe(0);
    expect(JSON.parse(text(r.stdout))).toEqual([
      { err: 'not-permitted' },
      { err: 'not-permitted' },
      { err: 'not-permitted' },
      { ok: SECRET },
    ]);
    unchanged();
  });
});
