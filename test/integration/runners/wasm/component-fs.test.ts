import { existsSync, lstatSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, realpath, rename, rm, symlink, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isCapsuleError } from '../../../../src/base/errors.js';
import { componentizeJs } from '../../../../src/runners/wasm/componentize.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import type { WasmRunSpec } from '../../../../src/runners/wasm/wasm-runner.js';
import type { DirGrant } from '../../../../src/runners/wasm/dir-grants.js';
import { eventually } from '../../../helpers/eventually.js';
import { FIXTURES, wasmCapability } from './helpers.js';
import { permitFor } from '../../../helpers/permit.js';

// A component capability reads and writes its granted folders and nothing else, judged on the host:
// what the guest managed to read shows in its output, what it managed to write shows on disk.

const runner = new WasmRunner({ poolSize: 1 });
afterAll(() => runner.close());

let probe: Uint8Array;
beforeAll(async () => {
  const source = readFileSync(new URL('fsprobe/fsprobe.js', FIXTURES), 'utf8');
  probe = (await componentizeJs(source, { file: 'fsprobe.js' })).component;
}, 60_000);

type Outcome = { ok: unknown } | { err: string };

async function ops(dirs: DirGrant[], list: Array<Record<string, unknown>>, extra: Partial<WasmRunSpec> = {}) {
  const r = await runner.runRaw({
    file: 'fsprobe.wasm',
    bytes: probe,
    programName: 'fsprobe',
    args: [],
    env: {},
    input: Buffer.from(JSON.stringify({ ops: list })),
    dirs,
    timeoutMs: 10_000,
    memoryMb: 64,
    outputBytes: 1024 * 1024,
    ...extra,
  });
  const stdout = Buffer.from(r.stdout).toString('utf8');
  expect(r.exitCode, `${stdout}\n${Buffer.from(r.stderr).toString('utf8')}`).toBe(0);
  return JSON.parse(stdout) as Outcome[];
}

/** A fresh layout: <tmp>/grant (the granted folder), <tmp>/outside/secret.txt beside it. */
async function layout(): Promise<{ base: string; grant: string; outside: string }> {
  const base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-cfs-')));
  const grant = path.join(base, 'grant');
  const outside = path.join(base, 'outside');
  await mkdir(grant);
  await mkdir(outside);
  await writeFile(path.join(grant, 'in.txt'), 'granted text');
  await writeFile(path.join(outside, 'secret.txt'), 'TOP-SECRET');
  return { base, grant, outside };
}

const rw = (hostPath: string, guestPath = '/data'): DirGrant => ({ hostPath, guestPath, mode: 'rw' });
const ro = (hostPath: string, guestPath = '/data'): DirGrant => ({ hostPath, guestPath, mode: 'ro' });
const names = (dir: string): string[] => readdirSync(dir).sort();

/** A refusal the guest got as a wasi:filesystem error-code (not a JS exception from a missing call). */
function refused(o: Outcome | undefined): void {
  expect(o).toEqual({ err: expect.stringMatching(/^[a-z]+(-[a-z]+)*$/) });
}

describe('components: wasi:filesystem on granted folders', () => {
  it('reads a granted file and writes one into a rw grant, directly on the host folder', async () => {
    const { grant } = await layout();
    const out = await ops(
      [rw(grant)],
      [
        { op: 'preopens' },
        { op: 'read', pre: '/data', path: 'in.txt' },
        { op: 'stream', pre: '/data', path: 'in.txt' },
        { op: 'mkdir', pre: '/data', path: 'sub' },
        { op: 'write', pre: '/data', path: 'sub/result.txt', text: 'made by the guest' },
        { op: 'append', pre: '/data', path: 'sub/result.txt', text: '!' },
        { op: 'size', pre: '/data', path: 'sub/result.txt' },
        { op: 'rename', pre: '/data', from: 'sub/result.txt', to: 'result.txt' },
        { op: 'list', pre: '/data' },
        { op: 'rmdir', pre: '/data', path: 'sub' },
      ],
    );
    expect(out).toEqual([
      { ok: ['/data'] },
      { ok: 'granted text' },
      { ok: 'granted text' },
      { ok: 'made' },
      { ok: 'written' },
      { ok: 'appended' },
      { ok: '18' },
      { ok: 'renamed' },
      { ok: ['in.txt', 'result.txt', 'sub'] },
      { ok: 'removed' },
    ]);
    expect(await readFile(path.join(grant, 'result.txt'), 'utf8')).toBe('made by the guest!');
    expect(names(grant)).toEqual(['in.txt', 'result.txt']);
  });

  it('refuses `..` above the grant and absolute paths; nothing outside is read or written', async () => {
    const { base, grant, outside } = await layout();
    const out = await ops(
      [rw(grant)],
      [
        { op: 'read', pre: '/data', path: '../outside/secret.txt' },
        { op: 'read', pre: '/data', path: 'x/../../outside/secret.txt' },
        { op: 'read', pre: '/data', path: `${outside}/secret.txt` },
        { op: 'read', pre: '/data', path: '/etc/passwd' },
        { op: 'write', pre: '/data', path: '../planted.txt' },
        { op: 'write', pre: '/data', path: `${outside}/planted.txt` },
        { op: 'mkdir', pre: '/data', path: '../made' },
        { op: 'rename', pre: '/data', from: 'in.txt', to: '../outside/moved.txt' },
        { op: 'unlink', pre: '/data', path: '../outside/secret.txt' },
        { op: 'subdir', pre: '/data', dir: '.', path: '../outside/secret.txt' },
        { op: 'link', pre: '/data', from: '../outside/secret.txt', to: 'stolen.txt' },
        { op: 'symlink', pre: '/data', target: '../outside/secret.txt', path: 'stolen-link' },
      ],
    );
    for (const o of out) refused(o);
    expect(JSON.stringify(out)).not.toContain('TOP-SECRET');
    expect(JSON.stringify(out)).not.toContain('root:');
    expect(names(base)).toEqual(['grant', 'outside']);
    expect(names(outside)).toEqual(['secret.txt']);
    expect(await readFile(path.join(outside, 'secret.txt'), 'utf8')).toBe('TOP-SECRET');
    expect(names(grant)).toEqual(['in.txt']);
  });

  it('treats a preopen at guest / like any other: absolute paths are still refused', async () => {
    const { grant } = await layout();
    const out = await ops(
      [ro(grant, '/')],
      [
        { op: 'preopens' },
        { op: 'read', pre: '/', path: '/etc/passwd' },
        { op: 'read', pre: '/', path: 'etc/passwd' },
        { op: 'read', pre: '/', path: '../../../../etc/passwd' },
        { op: 'read', pre: '/', path: 'in.txt' },
      ],
    );
    expect(out[0]).toEqual({ ok: ['/'] });
    expect(out.slice(1, 4)).toEqual([
      { err: 'not-permitted' },
      { err: 'no-entry' },
      { err: 'not-permitted' },
    ]);
    expect(out[4]).toEqual({ ok: 'granted text' });
  });

  it('never hands out a file from outside while the host swaps a folder for a symlink out (TOCTOU)', async () => {
    const { grant, outside } = await layout();
    const sub = path.join(grant, 'sub');
    const aside = path.join(grant, 'sub-real');
    await mkdir(sub);
    await writeFile(path.join(sub, 'secret.txt'), 'DECOY');
    // The host flips grant/sub between the real folder and a symlink to <tmp>/outside for as long as
    // the guest keeps opening sub/secret.txt; every open races a flip.
    let running = true;
    let flips = 0;
    const flipper = (async () => {
      while (running) {
        await rename(sub, aside);
        await symlink(outside, sub);
        await rm(sub);
        await rename(aside, sub);
        flips += 1;
      }
    })();
    let out: Outcome[];
    try {
      out = await ops([ro(grant)], [{ op: 'race', pre: '/data', path: 'sub/secret.txt', n: 3000 }]);
    } finally {
      running = false;
      await flipper;
    }
    const seen = (out[0] as { ok: Record<string, number> }).ok;
    expect(flips).toBeGreaterThan(0);
    expect(seen['TOP-SECRET']).toBeUndefined();
    // The race really ran: some opens saw the real folder.
    expect(seen.DECOY).toBeGreaterThan(0);
  });

  it('does not follow a host-planted symlink out of the grant (to a folder, to a file, chained)', async () => {
    const { grant, outside } = await layout();
    await symlink(outside, path.join(grant, 'to-dir'));
    await symlink(path.join(outside, 'secret.txt'), path.join(grant, 'to-file'));
    await symlink('../outside', path.join(grant, 'relative-out'));
    await symlink('relative-out', path.join(grant, 'chained'));
    await symlink('loop-b', path.join(grant, 'loop-a'));
    await symlink('loop-a', path.join(grant, 'loop-b'));
    const out = await ops(
      [rw(grant)],
      [
        { op: 'read', pre: '/data', path: 'to-dir/secret.txt' },
        { op: 'read', pre: '/data', path: 'to-file' },
        { op: 'read', pre: '/data', path: 'relative-out/secret.txt' },
        { op: 'read', pre: '/data', path: 'chained/secret.txt' },
        { op: 'write', pre: '/data', path: 'to-dir/planted.txt' },
        { op: 'write', pre: '/data', path: 'to-file', text: 'overwritten' },
        { op: 'write', pre: '/data', path: 'relative-out/planted.txt' },
        { op: 'list', pre: '/data', path: 'to-dir' },
        { op: 'read', pre: '/data', path: 'loop-a' },
      ],
    );
    for (const o of out) refused(o);
    expect(out.at(-1)).toEqual({ err: 'loop' });
    expect(JSON.stringify(out)).not.toContain('TOP-SECRET');
    expect(names(outside)).toEqual(['secret.txt']);
    expect(await readFile(path.join(outside, 'secret.txt'), 'utf8')).toBe('TOP-SECRET');
  });

  it('lets the guest make symlinks that stay inside, refuses ones that lead out at creation', async () => {
    const { grant, outside } = await layout();
    const out = await ops(
      [rw(grant)],
      [
        { op: 'symlink', pre: '/data', target: 'in.txt', path: 'alias' },
        { op: 'readlink', pre: '/data', path: 'alias' },
        { op: 'read', pre: '/data', path: 'alias' },
        { op: 'symlink', pre: '/data', target: '../outside/secret.txt', path: 'out-rel' },
        { op: 'symlink', pre: '/data', target: `${outside}/secret.txt`, path: 'out-abs' },
        { op: 'mkdir', pre: '/data', path: 'deep' },
        { op: 'symlink', pre: '/data', target: '../../outside', path: 'deep/out' },
      ],
    );
    expect(out.slice(0, 3)).toEqual([{ ok: 'symlinked' }, { ok: 'in.txt' }, { ok: 'granted text' }]);
    expect(out.slice(3, 5)).toEqual([{ err: 'not-permitted' }, { err: 'not-permitted' }]);
    expect(out[6]).toEqual({ err: 'not-permitted' });
    expect(readlinkSync(path.join(grant, 'alias'))).toBe('in.txt');
    expect(names(grant)).toEqual(['alias', 'deep', 'in.txt']);
    expect(names(path.join(grant, 'deep'))).toEqual([]);
  });

  it('enforces a read-only grant: every modifying call fails and the folder is unchanged', async () => {
    const { grant } = await layout();
    await mkdir(path.join(grant, 'keep'));
    const before = lstatSync(path.join(grant, 'in.txt')).mtimeMs;
    const out = await ops(
      [ro(grant)],
      [
        { op: 'read', pre: '/data', path: 'in.txt' },
        { op: 'write', pre: '/data', path: 'in.txt', text: 'clobbered' },
        { op: 'write', pre: '/data', path: 'new.txt' },
        { op: 'append', pre: '/data', path: 'in.txt' },
        { op: 'mkdir', pre: '/data', path: 'made' },
        { op: 'rmdir', pre: '/data', path: 'keep' },
        { op: 'unlink', pre: '/data', path: 'in.txt' },
        { op: 'rename', pre: '/data', from: 'in.txt', to: 'moved.txt' },
        { op: 'symlink', pre: '/data', target: 'in.txt', path: 'alias' },
        { op: 'link', pre: '/data', from: 'in.txt', to: 'hard' },
      ],
    );
    expect(out[0]).toEqual({ ok: 'granted text' });
    for (const o of out.slice(1)) expect(o).toEqual({ err: 'read-only' });
    expect(names(grant)).toEqual(['in.txt', 'keep']);
    expect(await readFile(path.join(grant, 'in.txt'), 'utf8')).toBe('granted text');
    expect(lstatSync(path.join(grant, 'in.txt')).mtimeMs).toBe(before);
  });

  it('hides capsule state inside a grant: not read, not listed, not created', async () => {
    const { grant } = await layout();
    await mkdir(path.join(grant, 'nested', '.capsule'), { recursive: true });
    await writeFile(path.join(grant, 'nested', 'capsule.json'), '{"mode":"bypass"}');
    await writeFile(path.join(grant, 'nested', '.capsule', 'audit.jsonl'), 'AUDIT-LINE');
    const out = await ops(
      [rw(grant)],
      [
        { op: 'read', pre: '/data', path: 'nested/capsule.json' },
        { op: 'read', pre: '/data', path: 'nested/.capsule/audit.jsonl' },
        { op: 'read', pre: '/data', path: 'nested/CAPSULE.JSON' },
        { op: 'list', pre: '/data', path: 'nested' },
        { op: 'write', pre: '/data', path: 'capsule.json', text: '{"mode":"bypass"}' },
        { op: 'mkdir', pre: '/data', path: '.capsule' },
        { op: 'write', pre: '/data', path: '.capsule-gen-x' },
        { op: 'symlink', pre: '/data', target: 'nested/capsule.json', path: 'cfg' },
        { op: 'read', pre: '/data', path: 'cfg' },
        { op: 'rename', pre: '/data', from: 'in.txt', to: 'nested/capsule.json' },
      ],
    );
    expect(out[3]).toEqual({ ok: [] });
    for (const o of [...out.slice(0, 3), ...out.slice(4, 7), ...out.slice(8)]) refused(o);
    expect(JSON.stringify(out)).not.toContain('bypass');
    expect(JSON.stringify(out)).not.toContain('AUDIT-LINE');
    expect(names(grant)).not.toContain('capsule.json');
    expect(names(grant)).not.toContain('.capsule');
    expect(names(grant)).not.toContain('.capsule-gen-x');
    expect(await readFile(path.join(grant, 'nested', 'capsule.json'), 'utf8')).toBe('{"mode":"bypass"}');
  });

  it('keeps renames and hard links within one preopen, and a subdirectory descriptor within itself', async () => {
    const { base, grant } = await layout();
    const other = path.join(base, 'other');
    await mkdir(other);
    await mkdir(path.join(grant, 'sub'));
    await writeFile(path.join(grant, 'sub', 'deep.txt'), 'deep');
    const out = await ops(
      [rw(grant), rw(other, '/other')],
      [
        { op: 'rename', pre: '/data', from: 'in.txt', toPre: '/other', to: 'moved.txt' },
        { op: 'link', pre: '/data', from: 'in.txt', toPre: '/other', to: 'hard.txt' },
        { op: 'link', pre: '/data', from: 'in.txt', to: 'hard.txt' },
        { op: 'subdir', pre: '/data', dir: 'sub', path: 'deep.txt' },
        { op: 'subdir', pre: '/data', dir: 'sub', path: '../in.txt' },
      ],
    );
    expect(out).toEqual([
      { err: 'cross-device' },
      { err: 'cross-device' },
      { ok: 'linked' },
      { ok: 'deep' },
      { err: 'not-permitted' },
    ]);
    expect(names(other)).toEqual([]);
    expect(names(grant)).toEqual(['hard.txt', 'in.txt', 'sub']);
  });

  it('closes every file the guest opened when the call ends', async () => {
    const { grant } = await layout();
    const fds = (): number => readdirSync('/proc/self/fd').length;
    await ops([rw(grant)], [{ op: 'read', pre: '/data', path: 'in.txt' }]); // warm the worker
    const before = fds();
    for (let i = 0; i < 3; i++) {
      expect(await ops([rw(grant)], [{ op: 'leak', pre: '/data', path: 'in.txt', n: 50 }])).toEqual([
        { ok: 'leaked' },
      ]);
    }
    expect(fds()).toBeLessThanOrEqual(before);
    // A guest that never drops what it opens is stopped at the per-call cap (host fds are capsule's).
    const [capped] = await ops([rw(grant)], [{ op: 'leak', pre: '/data', path: 'in.txt', n: 5000 }]);
    expect(capped).toEqual({ err: 'insufficient-memory' });
    expect(fds()).toBeLessThanOrEqual(before);
  });

  it('fails the call, not the host, when a grant turned into a symlink after it was checked', async () => {
    const { base, outside } = await layout();
    const swapped = path.join(base, 'swapped');
    await symlink(outside, swapped);
    const err = await runner
      .runRaw({
        file: 'fsprobe.wasm',
        bytes: probe,
        programName: 'fsprobe',
        args: [],
        env: {},
        input: Buffer.from(JSON.stringify({ ops: [{ op: 'read', pre: '/data', path: 'secret.txt' }] })),
        dirs: [ro(swapped)],
        timeoutMs: 10_000,
        memoryMb: 64,
        outputBytes: 1024 * 1024,
      })
      .then(
        (r) => Buffer.from(r.stdout).toString('utf8'),
        (e: unknown) => e,
      );
    // Refused before the call (the runner re-checks each grant) or by the worker's no-follow open.
    expect(isCapsuleError(err, 'UNSUPPORTED') || isCapsuleError(err, 'RUNNER_FAILED')).toBe(true);
    expect(String(err)).not.toContain('TOP-SECRET');
  });
});

describe('components: a folder granted to another capability', () => {
  it('is out of reach: the grant of one capability is its own folder only', async () => {
    const projectFiles = { 'a/mine.txt': 'mine', 'b/theirs.txt': 'THEIRS' };
    const { capability, root } = await wasmCapability('reader', probe, {
      projectFiles,
      manifest: { grants: { fs: [{ path: 'a', mode: 'rw' }] } },
    });
    const run = async (list: Array<Record<string, unknown>>): Promise<Outcome[]> => {
      const r = await runner.run({ capability, input: JSON.stringify({ ops: list }) }, permitFor(capability));
      expect(r.exitCode, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as Outcome[];
    };
    const out = await run([
      { op: 'preopens' },
      { op: 'read', pre: '/a', path: 'mine.txt' },
      { op: 'read', pre: '/a', path: '../b/theirs.txt' },
      { op: 'write', pre: '/a', path: '../b/planted.txt' },
      { op: 'read', pre: '/b', path: 'theirs.txt' },
      { op: 'read', pre: '/a', path: '../capsule.json' },
    ]);
    expect(out.slice(0, 2)).toEqual([{ ok: ['/a'] }, { ok: 'mine' }]);
    for (const o of out.slice(2)) refused(o);
    expect(JSON.stringify(out)).not.toContain('THEIRS');
    expect(names(path.join(root, 'b'))).toEqual(['theirs.txt']);
  });
});

describe('components: environment and network', () => {
  it('sees only granted host variables', async () => {
    const { capability } = await wasmCapability('envy', probe, {
      manifest: { grants: { env: ['CAPSULE_TEST_GRANTED'] } },
    });
    const envRunner = new WasmRunner({
      poolSize: 1,
      hostEnv: { CAPSULE_TEST_GRANTED: 'yes', CAPSULE_TEST_SECRET: 'HOST-SECRET', HOME: '/root' },
    });
    try {
      const r = await envRunner.run(
        { capability, input: JSON.stringify({ ops: [{ op: 'env' }] }) },
        permitFor(capability),
      );
      expect(JSON.parse(r.stdout)).toEqual([{ ok: [['CAPSULE_TEST_GRANTED', 'yes']] }]);
      expect(r.stdout).not.toContain('HOST-SECRET');
    } finally {
      await envRunner.close();
    }
  });

  it('gives a JS capability no socket or http interface: the build refuses, the listener sees nothing', async () => {
    let connections = 0;
    const server = net.createServer((s) => {
      connections += 1;
      s.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      for (const name of ['netprobe/netprobe.js', 'httpprobe/httpprobe.js']) {
        // Built against the authoring world (no witPath): it offers neither wasi:sockets nor wasi:http.
        const source = readFileSync(new URL(name, FIXTURES), 'utf8');
        const err = await componentizeJs(source, { file: name }).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(isCapsuleError(err, 'INPUT_INVALID')).toBe(true);
      }
      // Built against a world that does import sockets, it runs and is denied.
      const dir = new URL('netprobe/', FIXTURES);
      const art = await componentizeJs(readFileSync(new URL('netprobe.js', dir), 'utf8'), {
        witPath: new URL('wit', dir).pathname,
      });
      const port = (server.address() as net.AddressInfo).port;
      const r = await runner.runRaw({
        file: 'netprobe.wasm',
        bytes: art.component,
        programName: 'netprobe',
        args: [],
        env: {},
        input: Buffer.from(JSON.stringify({ port })),
        dirs: [],
        timeoutMs: 10_000,
        memoryMb: 64,
        outputBytes: 65536,
      });
      expect(Buffer.from(r.stdout).toString('utf8')).toBe('denied: "access-denied"\n');
      // The server's accept callback runs on this event loop: let it run before counting.
      await new Promise((resolve) => setImmediate(resolve));
      expect(connections).toBe(0);
    } finally {
      server.close();
    }
  });
});

describe('components: descriptor flags of a directory (mutate-directory)', () => {
  const changes = [
    { op: 'mkdir', path: 'made' },
    { op: 'rmdir', path: 'empty' },
    { op: 'setTimesAt', path: 'f.txt' },
    { op: 'symlink', target: 'f.txt', path: 'sym' },
    { op: 'write', path: 'new.txt', text: 'x' },
    { op: 'link', from: 'f.txt', to: 'hard.txt' },
    { op: 'rename', from: 'f.txt', to: 'moved.txt' },
    { op: 'unlink', path: 'hard.txt' },
  ];

  async function sub(): Promise<{ grant: string; before: string[]; mtime: number }> {
    const { grant } = await layout();
    await mkdir(path.join(grant, 'sub', 'empty'), { recursive: true });
    await writeFile(path.join(grant, 'sub', 'f.txt'), 'kept');
    return {
      grant,
      before: names(path.join(grant, 'sub')),
      mtime: lstatSync(path.join(grant, 'sub', 'f.txt')).mtimeMs,
    };
  }

  it('a directory opened without mutate-directory in a rw grant changes nothing through it', async () => {
    const { grant, before, mtime } = await sub();
    const [out] = await ops(
      [rw(grant)],
      [{ op: 'inSub', pre: '/data', sub: 'sub', flags: { read: true }, then: changes }],
    );
    expect(out).toEqual({ ok: changes.map(() => ({ err: 'not-permitted' })) });
    expect(names(path.join(grant, 'sub'))).toEqual(before);
    expect(readFileSync(path.join(grant, 'sub', 'f.txt'), 'utf8')).toBe('kept');
    expect(lstatSync(path.join(grant, 'sub', 'f.txt')).mtimeMs).toBe(mtime);
  });

  it('control: the same directory opened with mutate-directory makes every change', async () => {
    const { grant } = await sub();
    const [out] = await ops(
      [rw(grant)],
      [
        {
          op: 'inSub',
          pre: '/data',
          sub: 'sub',
          flags: { read: true, mutateDirectory: true },
          then: changes,
        },
      ],
    );
    expect((out as { ok: Array<{ ok?: unknown }> }).ok.every((o) => 'ok' in o)).toBe(true);
    expect(names(path.join(grant, 'sub'))).toEqual(['made', 'moved.txt', 'new.txt', 'sym']);
  });
});

describe('components: canceled while running', () => {
  // The guest writes `started` into its rw grant, then loops: the file is the outside sign that it
  // runs, so the test cancels a running guest, not one still starting (no guessed delay).
  const spinning = (grant: string, signal?: AbortSignal, own = runner) =>
    own.runRaw({
      file: 'fsprobe.wasm',
      bytes: probe,
      programName: 'fsprobe',
      args: [],
      env: {},
      input: Buffer.from(JSON.stringify({ ops: [{ op: 'spin', pre: '/data', path: 'started' }] })),
      dirs: [rw(grant)],
      timeoutMs: 60_000,
      memoryMb: 64,
      outputBytes: 65536,
      signal,
    });

  it('ends on AbortSignal as canceled, and the next call runs', async () => {
    const { grant } = await layout();
    const ac = new AbortController();
    const pending = spinning(grant, ac.signal);
    await eventually(() => existsSync(path.join(grant, 'started')), 'the guest to have started');
    ac.abort();
    expect(await pending).toMatchObject({ canceled: true, timedOut: false, exitCode: null });
    expect(await ops([ro(grant)], [{ op: 'read', pre: '/data', path: 'in.txt' }])).toEqual([
      { ok: 'granted text' },
    ]);
  });

  it('ends as canceled when the runner closes', async () => {
    const { grant } = await layout();
    const own = new WasmRunner({ poolSize: 1 });
    const pending = spinning(grant, undefined, own);
    await eventually(() => existsSync(path.join(grant, 'started')), 'the guest to have started');
    await own.close();
    expect(await pending).toMatchObject({ canceled: true, timedOut: false, exitCode: null });
  });
});

describe('the shipped digest-notes example', () => {
  it('writes its digest into data/digests and nothing else', async () => {
    const repo = path.resolve(new URL('../../../../', import.meta.url).pathname);
    const src = path.join(repo, 'capabilities', 'digest-notes');
    expect(existsSync(path.join(src, 'digest.wasm'))).toBe(true);
    const { capability, root } = await wasmCapability(
      'digest-notes',
      readFileSync(path.join(src, 'digest.wasm')),
      {
        projectFiles: { 'data/notes/n.txt': 'b a b\nc b\n', 'data/digests/.keep': '' },
        manifest: {
          entry: 'digest-notes.wasm',
          grants: {
            fs: [
              { path: 'data/notes', mode: 'ro' },
              { path: 'data/digests', mode: 'rw' },
            ],
          },
        },
      },
    );
    const r = await runner.run({ capability, input: '{"file":"n.txt"}' }, permitFor(capability));
    expect(JSON.parse(r.stdout)).toMatchObject({
      lines: 2,
      words: 5,
      top: [{ word: 'b', n: 3 }, { word: 'a' }, { word: 'c' }],
    });
    const written = JSON.parse(await readFile(path.join(root, 'data/digests/n.txt.digest.json'), 'utf8'));
    expect(written).toMatchObject({ file: 'n.txt', words: 5 });
    expect(names(path.join(root, 'data/notes'))).toEqual(['n.txt']);
  });
});
