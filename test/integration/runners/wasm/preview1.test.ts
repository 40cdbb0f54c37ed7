import { existsSync, lstatSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { mkdir, realpath, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isCapsuleError } from '../../../../src/base/errors.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import type { WasmRawResult, WasmRunSpec } from '../../../../src/runners/wasm/wasm-runner.js';
import type { DirGrant } from '../../../../src/runners/wasm/dir-grants.js';
import { webAssembly } from '../../../../src/runners/wasm/wasm-types.js';
import { tempProject } from '../../../helpers/capability.js';
import { eventually } from '../../../helpers/eventually.js';
import { assemble, rawSpec, wasmCapability } from './helpers.js';
import { permitFor, withPermit } from '../../../helpers/permit.js';

const probe = assemble('probe.wat');
const runner = new WasmRunner({ poolSize: 2 });
afterAll(() => runner.close());

const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

function spec(args: string[], extra: Partial<WasmRunSpec> = {}): WasmRunSpec {
  return rawSpec('probe.wasm', probe, '', { args, timeoutMs: 5_000, memoryMb: 16, ...extra });
}

const runProbe = (args: string[], extra: Partial<WasmRunSpec> = {}): Promise<WasmRawResult> =>
  runner.runRaw(spec(args, extra));

async function expectStartError(p: Promise<unknown>, pattern: RegExp): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isCapsuleError(err), String(err)).toBe(true);
  expect((err as Error).message).toMatch(pattern);
}

describe('WasmRunner: WASI preview1 basics', () => {
  it('passes stdin through to stdout', async () => {
    const r = await runProbe(['cat'], { input: Buffer.from('{"name":"world"}') });
    expect(r).toMatchObject({
      environment: 'wasm',
      exitCode: 0,
      timedOut: false,
      truncated: false,
      oomKilled: false,
    });
    expect(text(r.stdout)).toBe('{"name":"world"}');
  });

  it('passes arguments verbatim', async () => {
    const r = await runProbe(['args', 'a b', '--flag', '']);
    expect(text(r.stdout)).toBe('a b\n--flag\n\n');
  });

  it('preserves proc_exit codes and stderr', async () => {
    const r = await runProbe(['xit', '42']);
    expect(r.exitCode).toBe(42);
    expect(text(r.stderr)).toBe('bye\n');
  });

  it('runs a capability through run(): manifest args, stdin input, granted env only', async () => {
    const { capability } = await wasmCapability('envprobe', probe, {
      manifest: { args: ['env'], grants: { env: ['CAPSULE_GRANTED'] } },
    });
    const r2 = new WasmRunner({
      poolSize: 1,
      hostEnv: { CAPSULE_GRANTED: 'yes', CAPSULE_SECRET: 'hunter2', HOME: '/root' },
    });
    try {
      const r = await r2.run({ capability, input: '{}' }, permitFor(capability));
      expect(r.exitCode).toBe(0);
      // Only the granted variable: the host's secret and HOME never reach the guest.
      expect(r.stdout).toBe('CAPSULE_GRANTED=yes\n');
    } finally {
      await r2.close();
    }
  });

  it("refuses grants.network for a preview1 module: only components get capsule's HTTP", async () => {
    const { capability } = await wasmCapability('netcap', probe, {
      manifest: { args: ['cat'], grants: { network: [{ host: 'example.com' }] } },
    });
    await expectStartError(
      runner.run({ capability, input: '{}' }, permitFor(capability)),
      /preview1 module, which gets no network/,
    );
  });

  it('gives an empty environment when nothing is granted', async () => {
    process.env.CAPSULE_TEST_SECRET = 'hunter2';
    try {
      const { capability } = await wasmCapability('envnone', probe, { manifest: { args: ['env'] } });
      const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toBe('');
    } finally {
      delete process.env.CAPSULE_TEST_SECRET;
    }
  });
});

describe('WasmRunner: filesystem confinement (attacks)', () => {
  let root: string;
  let data: string;
  let outside: string;
  const ro = (): DirGrant[] => [{ hostPath: data, guestPath: '/data', mode: 'ro' }];
  const rw = (): DirGrant[] => [{ hostPath: data, guestPath: '/data', mode: 'rw' }];

  beforeAll(async () => {
    ({ root } = await tempProject('capsule-wasm-fs-'));
    data = path.join(root, 'data');
    outside = await realpath(root);
    await mkdir(path.join(data, 'sub'), { recursive: true });
    await writeFile(path.join(data, 'hello.txt'), 'hello from the grant\n');
    await writeFile(path.join(data, 'sub', 'deep.txt'), 'deep\n');
    await writeFile(path.join(root, 'secret.txt'), 'TOP SECRET\n');
    await mkdir(path.join(root, 'elsewhere'));
    // Planted by someone else inside the granted directory, pointing out of it.
    await symlink('/etc', path.join(data, 'etc-link'));
    await symlink(path.join(root, 'secret.txt'), path.join(data, 'secret-link'));
    await symlink(path.join(root, 'elsewhere'), path.join(data, 'out-dir'));
  });

  it('reads a granted file, also when asking for every right a libc fopen(…, "r") asks for', async () => {
    for (const how of ['read', 'fopen']) {
      const r = await runProbe([how, 'sub/deep.txt'], { dirs: ro() });
      expect(r.exitCode, how).toBe(0);
      expect(text(r.stdout)).toBe('deep\n');
    }
  });

  it('propagates deletions and new directories from a rw grant', async () => {
    await writeFile(path.join(data, 'doomed.txt'), 'bye');
    expect((await runProbe(['unlink', 'doomed.txt'], { dirs: rw() })).exitCode).toBe(0);
    expect(existsSync(path.join(data, 'doomed.txt'))).toBe(false);
    expect((await runProbe(['dir', 'made'], { dirs: rw() })).exitCode).toBe(0);
    expect(lstatSync(path.join(data, 'made')).isDirectory()).toBe(true);
  });

  it.each([
    ['..', '../secret.txt'],
    ['.. after a subdirectory', 'sub/../../secret.txt'],
    ['an absolute host path', '/etc/passwd'],
    ['an absolute host path of the project', '<root>/secret.txt'],
    ['a planted directory symlink', 'etc-link/passwd'],
    ['a planted file symlink', 'secret-link'],
  ])('refuses to read outside the preopen via %s', async (_how, target) => {
    const r = await runProbe(['read', target.replace('<root>', outside)], { dirs: ro() });
    expect(r.exitCode).not.toBe(0);
    expect(text(r.stderr)).toMatch(/^errno=\d+/);
    expect(text(r.stdout)).not.toMatch(/root:|TOP SECRET/);
  });

  it('control: bare node:wasi on the real directory IS escaped by the planted symlink (why capsule resolves paths itself)', async () => {
    const { WASI } = await import('node:wasi');
    const { openSync, closeSync, readFileSync: read } = await import('node:fs');
    const outFile = path.join(root, 'control-out.txt');
    const out = openSync(outFile, 'w');
    try {
      const wasi = new WASI({
        version: 'preview1',
        args: ['probe', 'read', 'etc-link/passwd'],
        env: {},
        preopens: { '/data': data },
        stdout: out,
        returnOnExit: true,
      });
      const WA = webAssembly();
      const instance = new WA.Instance(new WA.Module(probe), { wasi_snapshot_preview1: wasi.wasiImport });
      expect(wasi.start(instance as never)).toBe(0);
    } finally {
      closeSync(out);
    }
    expect(read(outFile, 'utf8')).toMatch(/^root:/);
  });

  it('refuses to read anything when no directory is granted', async () => {
    const r = await runProbe(['read', '/etc/passwd']);
    expect(text(r.stderr)).toBe('errno=8\n'); // EBADF: there is no preopen at all
    expect(text(r.stdout)).toBe('');
  });

  it('makes a ro grant really read-only: overwrite, create, mkdir, unlink all fail with ROFS', async () => {
    for (const args of [
      ['write', 'hello.txt'],
      ['write', 'new.txt'],
      ['dir', 'newdir'],
      ['unlink', 'hello.txt'],
    ]) {
      const r = await runProbe(args, { dirs: ro() });
      expect(text(r.stderr), args.join(' ')).toBe('errno=69\n');
    }
    expect(readFileSync(path.join(data, 'hello.txt'), 'utf8')).toBe('hello from the grant\n');
    expect(existsSync(path.join(data, 'new.txt'))).toBe(false);
    expect(existsSync(path.join(data, 'newdir'))).toBe(false);
  });

  it('refuses to create a symlink that leads out (the guest cannot make its own way out)', async () => {
    for (const dirs of [ro(), rw()]) {
      const r = await runProbe(['link', '/etc', 'mylink'], { dirs });
      expect(r.exitCode).not.toBe(0);
    }
    expect(existsSync(path.join(data, 'mylink'))).toBe(false);
  });

  it('writes back what the guest wrote into a rw grant, and nothing outside it', async () => {
    const r = await runProbe(['write', 'out.txt'], { dirs: rw() });
    expect(r.exitCode).toBe(0);
    expect(readFileSync(path.join(data, 'out.txt'), 'utf8')).toBe('pwned');
    const escape = await runProbe(['write', '../escape.txt'], { dirs: rw() });
    expect(escape.exitCode).not.toBe(0);
    expect(existsSync(path.join(root, 'escape.txt'))).toBe(false);
  });

  it('never writes through a symlink planted in a rw grant', async () => {
    const viaLink = await runProbe(['write', 'out-dir/x.txt'], { dirs: rw() });
    expect(viaLink.exitCode).not.toBe(0);
    // The guest works on the folder itself: making a directory where the link is fails (EEXIST),
    // and nothing appears where the link leads.
    const mk = await runProbe(['dir', 'out-dir'], { dirs: rw() });
    expect(text(mk.stderr)).toBe('errno=20\n');
    const mkIn = await runProbe(['dir', 'out-dir/made'], { dirs: rw() });
    expect(mkIn.exitCode).not.toBe(0);
    expect(readdirSync(path.join(root, 'elsewhere'))).toEqual([]);
    expect(lstatSync(path.join(data, 'out-dir')).isSymbolicLink()).toBe(true);
    expect(readlinkSync(path.join(data, 'out-dir'))).toBe(path.join(root, 'elsewhere'));
  });

  it('applies a manifest grant at /<declared path>, read-only by default', async () => {
    const { capability, root: capRoot } = await wasmCapability('reader', probe, {
      manifest: { args: ['read', '/docs/readme.txt'], grants: { fs: [{ path: 'docs' }] } },
      projectFiles: { 'docs/readme.txt': 'granted docs\n' },
    });
    expect(capability.fsGrants).toHaveLength(1);
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    // The probe hands the path to path_open on fd 3 (the /docs preopen) as is; raw absolute paths are
    // refused (NOTCAPABLE). A libc program opening "/docs/readme.txt" finds the preopen by prefix instead.
    expect(r.stderr).toBe('errno=76\n');
    expect(r.stdout).toBe('');
    const name = await runner.run(
      ...withPermit({
        capability: { ...capability, manifest: { ...capability.manifest, args: ['preopen'] } },
        input: '{}',
      }),
    );
    expect(name.stdout).toBe('/docs');
    const rel = await runner.run(
      ...withPermit({
        capability: { ...capability, manifest: { ...capability.manifest, args: ['read', 'readme.txt'] } },
        input: '{}',
      }),
    );
    expect(rel.stdout).toBe('granted docs\n');
    const write = await runner.run(
      ...withPermit({
        capability: { ...capability, manifest: { ...capability.manifest, args: ['write', 'readme.txt'] } },
        input: '{}',
      }),
    );
    expect(write.stderr).toBe('errno=69\n');
    expect(readFileSync(path.join(capRoot, 'docs/readme.txt'), 'utf8')).toBe('granted docs\n');
  });
});

describe('WasmRunner: limits', () => {
  it('kills an infinite loop at the timeout, replaces the worker, and the next call works', async () => {
    const r = await runProbe(['ispin'], { timeoutMs: 300 });
    expect(r).toMatchObject({ timedOut: true, exitCode: null, canceled: false });
    const next = await runProbe(['cat'], { input: Buffer.from('still alive') });
    expect(text(next.stdout)).toBe('still alive');
  });

  it('a worker that slept between jobs (past its idle turn) still runs the next, and a loop there is stopped', async () => {
    const own = new WasmRunner({ poolSize: 1 });
    try {
      await own.warm();
      // Longer than a worker sleeps on its doorbell before giving its event loop a turn (1 s).
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      const first = await own.runRaw({ ...spec(['cat']), input: Buffer.from('after a nap') });
      expect(text(first.stdout)).toBe('after a nap');
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      // Canceled mid-loop, once the guest says it runs: the pool terminates the blocked-between-jobs
      // worker like any other.
      const controller = new AbortController();
      const { dirs, started } = await spinning();
      const loop = own.runRaw({
        ...spec(['Ispin', 'started'], { dirs }),
        timeoutMs: 60_000,
        signal: controller.signal,
      });
      await eventually(() => existsSync(started), 'the guest to have started');
      controller.abort();
      expect(await loop).toMatchObject({ canceled: true, timedOut: false, exitCode: null });
      const next = await own.runRaw({ ...spec(['cat']), input: Buffer.from('replaced') });
      expect(text(next.stdout)).toBe('replaced');
    } finally {
      await own.close();
    }
  });

  it('stops a guest sleeping in poll_oneoff, and its thread is really gone (close() does not wait 10 s)', async () => {
    const own = new WasmRunner({ poolSize: 1 });
    const r = await own.runRaw({
      ...spec([]),
      file: 'sleep.wasm',
      bytes: assemble('sleep.wat'),
      timeoutMs: 300,
    });
    expect(r.timedOut).toBe(true);
    // close() resolves only once the pool's workers have exited (a live sleeping thread would hold it).
    await own.close();
  });

  it('kills a start function that loops (during instantiation)', async () => {
    const r = await runner.runRaw({
      ...spec([]),
      file: 'start-loop.wasm',
      bytes: assemble('start-loop.wat'),
      timeoutMs: 300,
    });
    expect(r.timedOut).toBe(true);
  });

  it('caps memory: unbounded growth stops at memoryMb, reported as oomKilled', async () => {
    // The probe touches every page it gets and traps when memory.grow is refused: the trap is the effect
    // of the cap (the host's RSS is the bench's to measure).
    const r = await runProbe(['malloc'], { memoryMb: 64 });
    expect(r).toMatchObject({ oomKilled: true, exitCode: 134, timedOut: false });
    expect(text(r.stderr)).toMatch(/wasm trap/);
  });

  it('caps output: an endless stdout flood is cut at outputBytes and reported as truncated', async () => {
    const r = await runProbe(['oflood'], { outputBytes: 100_000 });
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBe(100_000);
  });

  it('keeps every call separate under load: hung and normal calls interleaved on a small pool', async () => {
    const calls = Array.from({ length: 12 }, (_, i) =>
      i % 3 === 0
        ? runProbe(['ispin'], { timeoutMs: 200 })
        : runProbe(['cat'], { input: Buffer.from(`call ${i}`) }),
    );
    const results = await Promise.all(calls);
    results.forEach((r, i) => {
      if (i % 3 === 0) expect(r.timedOut).toBe(true);
      else expect(text(r.stdout)).toBe(`call ${i}`);
    });
  });

  /** A guest that writes `started` into a fresh rw grant, then spins: the file is the sign it runs. */
  async function spinning(): Promise<{ dirs: DirGrant[]; started: string }> {
    const { root } = await tempProject('capsule-wasm-spin-');
    return { dirs: [{ hostPath: root, guestPath: '/s', mode: 'rw' }], started: path.join(root, 'started') };
  }

  it('ends in-flight calls as canceled when the runner closes', async () => {
    const own = new WasmRunner({ poolSize: 1 });
    const { dirs, started } = await spinning();
    const pending = own.runRaw({ ...spec(['Ispin', 'started'], { dirs }), timeoutMs: 60_000 });
    // Close once the guest really runs (not after a guessed delay): closing earlier tests another path.
    await eventually(() => existsSync(started), 'the guest to have started');
    await own.close();
    expect(await pending).toMatchObject({ canceled: true, timedOut: false, exitCode: null });
  });

  it('cancels on AbortSignal, once the guest runs, and the next call works', async () => {
    const ac = new AbortController();
    const { dirs, started } = await spinning();
    const pending = runProbe(['Ispin', 'started'], { dirs, signal: ac.signal, timeoutMs: 60_000 });
    await eventually(() => existsSync(started), 'the guest to have started');
    ac.abort();
    expect(await pending).toMatchObject({ canceled: true, timedOut: false, exitCode: null });
    const next = await runProbe(['cat'], { input: Buffer.from('after the cancel') });
    expect(text(next.stdout)).toBe('after the cancel');
  });
});

describe('WasmRunner: refusing what cannot start', () => {
  it('refuses a malformed .wasm with a clear error naming the file', async () => {
    await expectStartError(
      runner.runRaw({ ...spec([]), file: 'junk.wasm', bytes: Buffer.from('not wasm at all') }),
      /junk\.wasm is not a WebAssembly binary/,
    );
    await expectStartError(
      runner.runRaw({ ...spec([]), file: 'cut.wasm', bytes: probe.subarray(0, probe.length - 50) }),
      /cut\.wasm (is a malformed|does not compile)/,
    );
  });

  it('answers EFAULT to a pointer outside guest memory (no host exception)', async () => {
    const r = await runner.runRaw({ ...spec([]), file: 'bad.wasm', bytes: assemble('bad-pointer.wat') });
    expect(r.exitCode).toBe(21);
  });

  it('refuses a module that imports memory', async () => {
    await expectStartError(
      runner.runRaw({ ...spec([]), file: 'mi.wasm', bytes: assemble('memory-import.wat') }),
      /imports its memory/,
    );
  });

  it('refuses a module whose initial memory exceeds the cap', async () => {
    await expectStartError(
      runner.runRaw({ ...spec([]), file: 'big.wasm', bytes: assemble('big-memory.wat'), memoryMb: 16 }),
      /more than the cap/,
    );
  });

  it('fails closed on an import no WASI host provides', async () => {
    await expectStartError(
      runner.runRaw({ ...spec([]), file: 'fi.wasm', bytes: assemble('foreign-import.wat') }),
      /fi\.wasm cannot start: .*open_socket/,
    );
  });

  it('reports a missing file as NOT_FOUND', async () => {
    await expectStartError(
      runner.runRaw({ ...spec([]), file: '/nonexistent/x.wasm', bytes: undefined }),
      /cannot read \/nonexistent\/x\.wasm/,
    );
  });
});
