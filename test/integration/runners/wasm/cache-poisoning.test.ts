import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, realpath, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { projectRegistry } from '../../../../src/cli/session.js';
import { createDefaultRunners } from '../../../../src/runtime/runners.js';
import type { Capability } from '../../../../src/manifest/types.js';
import type { Runner } from '../../../../src/runners/types.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import { assemble } from './helpers.js';
import { permitFor } from '../../../helpers/permit.js';
import { writeCapability } from '../../../helpers/capability.js';

const REPO = path.resolve(new URL('../../../../', import.meta.url).pathname);
const HELLO = readFileSync(path.join(REPO, 'capabilities/hello/hello.wasm'));
const HELLO_SHA = createHash('sha256').update(HELLO).digest('hex');

/** Transpiled-component JS that, once imported by the worker, leaves a marker on the host. */
function payload(marker: string): string {
  return [
    "import { writeFileSync } from 'node:fs';",
    `writeFileSync(${JSON.stringify(marker)}, 'host code ran');`,
    "export function instantiate() { return { run: () => 'owned' }; }",
    '',
  ].join('\n');
}

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

function wasmOf(runners: readonly Runner[]): Runner {
  const r = runners.find((x) => x.environment === 'wasm');
  if (r === undefined) throw new Error('no wasm runner');
  closers.push(async () => {
    for (const x of runners) await x.close();
  });
  return r;
}

async function runHello(runner: Runner, capability: Capability, name: string): Promise<string> {
  const r = await runner.run({ capability, input: JSON.stringify({ name }) }, permitFor(capability));
  return r.stdout;
}

/** Every file under `dir` whose name ends like one of `suffixes`. */
async function filesUnder(dir: string, suffixes: string[]): Promise<string[]> {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && suffixes.some((s) => e.name.endsWith(s))) out.push(path.join(e.parentPath, e.name));
  }
  return out;
}

describe('the transpiled-component cache is not trusted input', () => {
  it('a wasm capability granted the cache cannot make a later run of hello execute host code', async () => {
    const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-poison-')));
    const home = await mkdtemp(path.join(os.tmpdir(), 'capsule-poison-home-'));
    const marker = path.join(root, 'MARKER');
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
    await cp(path.join(REPO, 'capabilities/hello'), path.join(root, 'capabilities/hello'), {
      recursive: true,
    });
    // The attacker: a preview1 module that writes its input over the cached JS of hello, with
    // rw grants on every place a cache was or could be kept inside the project.
    await mkdir(path.join(root, '.capsule', 'cache', 'wasm', HELLO_SHA), { recursive: true });
    await writeCapability(
      path.join(root, 'capabilities'),
      'evil',
      {
        description: 'rewrites the component cache',
        environment: 'wasm',
        entry: 'evil.wasm',
        interpreter: undefined,
        args: ['save', `wasm/${HELLO_SHA}/component.mjs`],
        grants: { fs: [{ path: '.capsule/cache', mode: 'rw' }] },
      },
      { 'evil.wasm': assemble('probe.wat') },
    );
    const env = { PATH: process.env.PATH, HOME: home };
    const registry = projectRegistry(root, ['capabilities']);
    const hello = await registry.get('hello');

    const first = wasmOf(createDefaultRunners({ projectRoot: root, env }));
    expect(await runHello(first, hello, 'one')).toBe('Hello, one!\n');
    // The approved run of the attacker, if capsule lets it load at all.
    const loaded = await registry.get('evil').then(
      (c) => c,
      () => undefined,
    );
    if (loaded !== undefined)
      await first.run({ capability: loaded, input: payload(marker) }, permitFor(loaded));

    const later = wasmOf(createDefaultRunners({ projectRoot: root, env }));
    expect(await runHello(later, hello, 'two')).toBe('Hello, two!\n');
    expect(existsSync(marker)).toBe(false);
    expect(loaded).toBeUndefined();
  });

  it('the wasm runner refuses a capability whose grant reaches the cache, even if handed one past the loader', async () => {
    const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-poison-')));
    const home = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-poison-home-')));
    const marker = path.join(root, 'MARKER');
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
    await cp(path.join(REPO, 'capabilities/hello'), path.join(root, 'capabilities/hello'), {
      recursive: true,
    });
    await mkdir(path.join(root, 'data'));
    await writeCapability(
      path.join(root, 'capabilities'),
      'evil',
      {
        description: 'writes where it is granted',
        environment: 'wasm',
        entry: 'evil.wasm',
        interpreter: undefined,
        args: ['save', 'component.mjs'],
        grants: { fs: [{ path: 'data', mode: 'rw' }] },
      },
      { 'evil.wasm': assemble('probe.wat') },
    );
    const env = { PATH: process.env.PATH, HOME: home };
    const registry = projectRegistry(root, ['capabilities']);
    const hello = await registry.get('hello');
    const runner = wasmOf(createDefaultRunners({ projectRoot: root, env }));
    expect(await runHello(runner, hello, 'one')).toBe('Hello, one!\n');
    const [cachedJs] = await filesUnder(path.join(home, '.cache', 'capsule'), ['.mjs']);
    if (cachedJs === undefined) throw new Error('hello was not cached in the per-user cache dir');
    // Nothing executable is kept inside the project any more.
    expect(await filesUnder(root, ['.mjs'])).toEqual([]);
    // Code that builds Capability objects itself points the grant at the cache entry.
    const loaded = await registry.get('evil');
    for (const [declared, hostPath] of [
      ['data', path.dirname(cachedJs)],
      ['data', path.join(root, '.capsule')],
      ['data', root],
    ] as const) {
      const forged: Capability = { ...loaded, fsGrants: [{ declared, hostPath, mode: 'rw' }] };
      const err = await runner.run({ capability: forged, input: payload(marker) }, permitFor(forged)).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(`${hostPath}: ${(err as { code?: string } | undefined)?.code}`).toBe(
        `${hostPath}: PERMISSION_DENIED`,
      );
    }
    const later = wasmOf(createDefaultRunners({ projectRoot: root, env }));
    expect(await runHello(later, hello, 'two')).toBe('Hello, two!\n');
    expect(existsSync(marker)).toBe(false);
  });

  it('capsule run keeps the transpiled component in the per-user cache of the environment it was given', async () => {
    const { cli } = await import('../../../helpers/cli.js');
    const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-poison-')));
    const home = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-poison-home-')));
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
    await cp(path.join(REPO, 'capabilities/hello'), path.join(root, 'capabilities/hello'), {
      recursive: true,
    });
    const env = { PATH: process.env.PATH, HOME: home, XDG_CACHE_HOME: path.join(home, 'xdg') };
    const r = await cli(['run', 'hello', '--grant', 'run_capability:hello', '--input', '{"name":"cli"}'], {
      cwd: root,
      env,
    });
    expect(r.stdout).toContain('Hello, cli!');
    expect(await filesUnder(path.join(home, 'xdg', 'capsule', 'wasm'), ['meta.json'])).toHaveLength(1);
    expect(await filesUnder(root, ['.mjs', 'meta.json'])).toEqual([]);
  });

  it('JS rewritten on disk between two runs is a cache miss: re-transpiled, never imported', async () => {
    const cacheDir = await mkdtemp(path.join(os.tmpdir(), 'capsule-cache-tamper-'));
    const marker = path.join(cacheDir, '..', `capsule-tamper-marker-${process.pid}-${Date.now()}`);
    const spec = (name: string) => ({
      file: 'hello.wasm',
      bytes: HELLO,
      programName: 'hello',
      args: [],
      env: {},
      input: Buffer.from(JSON.stringify({ name })),
      dirs: [],
      timeoutMs: 10_000,
      memoryMb: 64,
      outputBytes: 65536,
    });
    const first = new WasmRunner({ poolSize: 1, cacheDir });
    closers.push(() => first.close());
    expect(Buffer.from((await first.runRaw(spec('one'))).stdout).toString()).toBe('Hello, one!\n');
    const js = await filesUnder(cacheDir, ['.mjs', '.js']);
    expect(js.length).toBeGreaterThan(0);
    for (const f of js) await writeFile(f, payload(marker));

    const second = new WasmRunner({ poolSize: 1, cacheDir });
    closers.push(() => second.close());
    expect(Buffer.from((await second.runRaw(spec('two'))).stdout).toString()).toBe('Hello, two!\n');
    expect(existsSync(marker)).toBe(false);
    // The bad entry was replaced by a good one: a third runner reads it back and runs hello.
    const third = new WasmRunner({ poolSize: 1, cacheDir });
    closers.push(() => third.close());
    expect(Buffer.from((await third.runRaw(spec('three'))).stdout).toString()).toBe('Hello, three!\n');
    expect(existsSync(marker)).toBe(false);
  });

  it('a rewritten core module, an extra file or a foreign transpiler version is a miss too', async () => {
    const cacheDir = await mkdtemp(path.join(os.tmpdir(), 'capsule-cache-tamper-'));
    const spec = {
      file: 'hello.wasm',
      bytes: HELLO,
      programName: 'hello',
      args: [],
      env: {},
      input: Buffer.from('{"name":"x"}'),
      dirs: [],
      timeoutMs: 10_000,
      memoryMb: 64,
      outputBytes: 65536,
    };
    const fresh = async (): Promise<string> => {
      const r = new WasmRunner({ poolSize: 1, cacheDir });
      closers.push(() => r.close());
      return Buffer.from((await r.runRaw(spec)).stdout).toString();
    };
    expect(await fresh()).toBe('Hello, x!\n');
    const cores = await filesUnder(cacheDir, ['.wasm']);
    expect(cores.length).toBeGreaterThan(0);
    for (const f of cores) await writeFile(f, Buffer.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]));
    expect(await fresh()).toBe('Hello, x!\n');
    const [jsFile] = await filesUnder(cacheDir, ['.mjs']);
    if (jsFile === undefined) throw new Error('no cached JS');
    await writeFile(path.join(path.dirname(jsFile), 'extra.wasm'), HELLO);
    expect(await fresh()).toBe('Hello, x!\n');
    // The key holds the transpiler version: entries of two versions never meet.
    const { ModuleCache } = await import('../../../../src/runners/wasm/module-cache.js');
    await new ModuleCache({ cacheDir, transpilerVersion: '0.0.0-other' }).prepare(HELLO, {
      file: 'hello.wasm',
      capPages: 1024,
    });
    const entries = (await filesUnder(cacheDir, ['meta.json'])).map((m) => path.relative(cacheDir, m));
    expect(entries.some((e) => e.includes('0.0.0-other'))).toBe(true);
    expect(entries.filter((e) => e.includes(HELLO_SHA))).toHaveLength(2);
  });
});
