import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isCapsuleError } from '../../../../src/base/errors.js';
import { InputValidator } from '../../../../src/manifest/input.js';
import { loadCapability } from '../../../../src/manifest/load.js';
import { componentizeJs } from '../../../../src/runners/wasm/componentize.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import type { WasmRunSpec } from '../../../../src/runners/wasm/wasm-runner.js';
import { eventually } from '../../../helpers/eventually.js';
import { FIXTURES, rawSpec } from './helpers.js';
import { permitFor } from '../../../helpers/permit.js';

const REPO = path.resolve(new URL('../../../../', import.meta.url).pathname);
const runner = new WasmRunner({ poolSize: 2 });
afterAll(() => runner.close());

const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

const spec = (bytes: Uint8Array, input: string, extra: Partial<WasmRunSpec> = {}): WasmRunSpec =>
  rawSpec('component.wasm', bytes, input, extra);

/** Connects to the test's own listener and waits until the listener has counted that connection. */
async function ownConnection(port: number, count: () => number): Promise<void> {
  const before = count();
  const socket = net.connect(port, '127.0.0.1');
  try {
    await eventually(() => count() > before, "the listener to see the test's own connection");
  } finally {
    socket.destroy();
  }
}

async function caught(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (e: unknown) => e,
  );
}

describe('componentizeJs', () => {
  it('turns a JS module exporting run() into a component, reporting progress', async () => {
    const stages: string[] = [];
    const art = await componentizeJs('export function run(input) { return input.toUpperCase(); }', {
      onProgress: (e) => stages.push(e.stage),
    });
    expect(Buffer.from(art.component.subarray(0, 8))).toEqual(
      Buffer.from([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0]),
    );
    expect(art.sha256).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(stages).toEqual(['start', 'componentize', 'done']);
    const r = await runner.runRaw(spec(art.component, 'shout'));
    expect(text(r.stdout)).toBe('SHOUT');
  });

  it('refuses a module without run() and a syntax error, naming the file', async () => {
    const noRun = await caught(componentizeJs('export function go() {}', { file: 'tool.js' }));
    expect(isCapsuleError(noRun, 'INPUT_INVALID')).toBe(true);
    expect((noRun as Error).message).toMatch(/tool\.js does not export a function named run/);
    const bad = await caught(componentizeJs('export function run( {', { file: 'broken.js' }));
    expect(isCapsuleError(bad, 'INPUT_INVALID')).toBe(true);
    expect((bad as Error).message).toMatch(/broken\.js could not be built/);
  });
});

describe('WasmRunner: components', () => {
  it('runs the shipped hello capability (JS-authored component) through run()', async () => {
    const capRoot = path.join(REPO, 'capabilities');
    const loaded = await loadCapability(path.join(capRoot, 'hello'), {
      root: capRoot,
      projectRoot: REPO,
      protectedPaths: [],
      inputValidator: new InputValidator(),
    });
    if (!loaded.ok) throw new Error(JSON.stringify(loaded.invalid.issues));
    const r = await runner.run(
      { capability: loaded.capability, input: '{"name":"world"}' },
      permitFor(loaded.capability),
    );
    expect(r).toMatchObject({ exitCode: 0, stdout: 'Hello, world!\n', stderr: '', timedOut: false });
  });

  it('reports a component whose JS throws as a failed run, not a crash', async () => {
    const art = await componentizeJs('export function run(input) { throw new Error("boom from JS"); }');
    const r = await runner.runRaw(spec(art.component, '{}'));
    expect(r.exitCode).not.toBe(0);
    expect(r.exitCode).not.toBeNull();
    expect(text(r.stderr)).toMatch(/boom from JS/);
    // The worker survives: the next call works.
    const ok = await runner.runRaw(
      spec(readFileSync(path.join(REPO, 'capabilities/hello/hello.wasm')), '{"name":"again"}'),
    );
    expect(text(ok.stdout)).toBe('Hello, again!\n');
  });

  it('sees no host environment and no Node/browser APIs', async () => {
    const art = await componentizeJs(
      'export function run() { return [typeof process, typeof require, typeof fetch, typeof std, typeof os].join(","); }',
    );
    const r = await runner.runRaw(spec(art.component, '{}'));
    expect(text(r.stdout)).toBe('undefined,undefined,undefined,undefined,undefined');
  });

  it('denies sockets: a component trying to connect to a loopback listener gets access-denied and the listener gets nothing', async () => {
    let connections = 0;
    let bytes = 0;
    const server = net.createServer((s) => {
      connections += 1;
      s.on('data', (d) => (bytes += d.length));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as net.AddressInfo).port;
      const dir = new URL('netprobe/', FIXTURES);
      const art = await componentizeJs(readFileSync(new URL('netprobe.js', dir), 'utf8'), {
        witPath: new URL('wit', dir).pathname,
      });
      const r = await runner.runRaw(spec(art.component, JSON.stringify({ port })));
      expect(text(r.stdout)).toBe('denied: "access-denied"\n');
      // A connection the guest had started would be queued before this one: once ours is accepted,
      // the count says whether there was another (no guessed delay).
      await ownConnection(port, () => connections);
      expect({ connections, bytes }).toEqual({ connections: 1, bytes: 0 });
    } finally {
      server.close();
    }
  });

  it('refuses a component that imports wasi:http before anything runs; the loopback listener gets nothing', async () => {
    let requests = 0;
    const server = net.createServer((s) => {
      requests += 1;
      s.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as net.AddressInfo).port;
      const dir = new URL('httpprobe/', FIXTURES);
      const art = await componentizeJs(readFileSync(new URL('httpprobe.js', dir), 'utf8'), {
        witPath: new URL('wit', dir).pathname,
      });
      const err = await caught(
        runner.runRaw(spec(art.component, JSON.stringify({ port }), { file: 'http.wasm' })),
      );
      expect(isCapsuleError(err, 'UNSUPPORTED')).toBe(true);
      expect((err as Error).message).toMatch(/http\.wasm imports wasi:http\/outgoing-handler/);
      await ownConnection(port, () => requests);
      expect(requests).toBe(1);
    } finally {
      server.close();
    }
  });

  it('fails closed when a component imports an interface the sandbox does not provide', async () => {
    const dir = new URL('evil-import/', FIXTURES);
    const art = await componentizeJs(readFileSync(new URL('evil.js', dir), 'utf8'), {
      witPath: new URL('wit', dir).pathname,
    });
    const err = await caught(runner.runRaw(spec(art.component, '{}', { file: 'evil.wasm' })));
    expect(isCapsuleError(err, 'UNSUPPORTED')).toBe(true);
    expect((err as Error).message).toMatch(/evil\.wasm imports capsule:evil\/host/);
  });

  it('stops a component in an endless loop at the timeout', async () => {
    const art = await componentizeJs('export function run() { for (;;) {} }');
    const r = await runner.runRaw(spec(art.component, '{}', { timeoutMs: 500 }));
    expect(r).toMatchObject({ timedOut: true, exitCode: null });
  });

  it('caps a component’s memory and reports oomKilled', async () => {
    const art = await componentizeJs(
      'export function run() { const a = []; for (;;) a.push(new Array(100000).fill(1.5)); }',
    );
    const r = await runner.runRaw(spec(art.component, '{}', { memoryMb: 48 }));
    expect(r.oomKilled).toBe(true);
    expect(r.exitCode).not.toBe(0);
  });

  it('caps a component’s output', async () => {
    const art = await componentizeJs('export function run() { return "x".repeat(200000); }');
    const r = await runner.runRaw(spec(art.component, '{}', { outputBytes: 1000 }));
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBe(1000);
  });

  it('keeps transpiled components in the on-disk cache, usable by a new runner', async () => {
    const cacheDir = await mkdtemp(path.join(os.tmpdir(), 'capsule-wasm-cache-'));
    const hello = readFileSync(path.join(REPO, 'capabilities/hello/hello.wasm'));
    const first = new WasmRunner({ poolSize: 1, cacheDir });
    try {
      expect(text((await first.runRaw(spec(hello, '{"name":"disk"}'))).stdout)).toBe('Hello, disk!\n');
    } finally {
      await first.close();
    }
    // One entry, keyed by transpiler version and component hash: wasm/<version>/<sha256>/.
    const versions = readdirSync(path.join(cacheDir, 'wasm'));
    expect(versions).toHaveLength(1);
    const entries = readdirSync(path.join(cacheDir, 'wasm', versions[0] ?? ''));
    expect(entries).toHaveLength(1);
    const entry = path.join(cacheDir, 'wasm', versions[0] ?? '', entries[0] ?? '');
    expect(existsSync(path.join(entry, 'component.mjs'))).toBe(true);
    expect(existsSync(path.join(entry, 'meta.json'))).toBe(true);
    const second = new WasmRunner({ poolSize: 1, cacheDir });
    try {
      expect(text((await second.runRaw(spec(hello, '{"name":"again"}'))).stdout)).toBe('Hello, again!\n');
    } finally {
      await second.close();
    }
  });
});
