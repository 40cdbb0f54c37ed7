import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EgressRecord } from '../../../src/permissions/types.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import { assemble, wasmCapability } from '../runners/wasm/helpers.js';
import { listen, mapResolver, type Listener } from './loopback.js';
import { permitFor } from '../../helpers/permit.js';

// A JS component with a one-host grant fetches from a loopback listener through capsule's host and is
// refused everywhere else. Judged by the listeners' accepted-connection counts.
const FETCH_WASM = readFileSync(
  fileURLToPath(new URL('../../../capabilities/fetch-wasm/fetch.wasm', import.meta.url)),
);

interface Output {
  hops: Array<{ url: string; status?: number; error?: string }>;
  body?: string;
}

describe('wasm component egress through capsule’s host', () => {
  let runner: WasmRunner;
  let granted: Listener;
  let denied: Listener;
  let other: Listener;
  const records: EgressRecord[] = [];
  const audit = (r: EgressRecord): Promise<void> => (records.push(r), Promise.resolve());

  beforeAll(async () => {
    runner = new WasmRunner({
      poolSize: 1,
      egressResolver: mapResolver({ 'api.test': '127.0.0.1', 'evil.test': '127.0.0.1' }),
    });
    denied = await listen();
    other = await listen();
    granted = await listen((req, res) => {
      if (req.url === '/redirect') {
        res.writeHead(302, { location: `http://evil.test:${denied.port}/` });
        res.end();
      } else if (req.url === '/big') res.end('z'.repeat(50_000));
      else res.end(`hello from the granted host (${req.method ?? ''})`);
    });
  });

  afterAll(async () => {
    await runner.close();
    await Promise.all([granted.close(), denied.close(), other.close()]);
  });

  async function run(
    input: Record<string, unknown>,
    limits: Record<string, number> = {},
    network?: unknown,
  ): Promise<Output> {
    const { capability } = await wasmCapability('fetch', FETCH_WASM, {
      manifest: {
        limits: { timeoutMs: 10_000, ...limits },
        // Loopback is internal: granted explicitly, the way a user grants an internal host.
        grants: {
          network: network ?? [{ host: 'api.test', ports: [granted.port], internal: ['127.0.0.1'] }],
        },
      },
    });
    const r = await runner.run(
      { capability, input: JSON.stringify(input), egressAudit: audit },
      permitFor(capability),
    );
    expect(r.stderr).toBe('');
    expect(r.exitCode).toBe(0);
    return JSON.parse(r.stdout) as Output;
  }

  it('a granted host answers; the request is audited with its bytes', async () => {
    const before = records.length;
    const out = await run({ url: `http://api.test:${granted.port}/` });
    expect(out.hops).toEqual([{ url: `http://api.test:${granted.port}/`, status: 200 }]);
    expect(out.body).toBe('hello from the granted host (GET)');
    expect(records.slice(before)).toMatchObject([
      {
        decision: 'allow',
        host: 'api.test',
        port: granted.port,
        method: 'GET',
        address: '127.0.0.1',
        bytesIn: out.body?.length,
      },
    ]);
  });

  it('ungranted host, IP literal, another port, and an ungranted redirect: refused, no listener reached', async () => {
    const grantedBefore = granted.connections;
    for (const url of [
      `http://evil.test:${denied.port}/`,
      `http://127.0.0.1:${granted.port}/`,
      `http://2130706433:${granted.port}/`,
      `http://[::ffff:127.0.0.1]:${granted.port}/`,
      `http://api.test:${other.port}/`,
      `http://user:pw@api.test:${granted.port}/`,
      `file:///etc/passwd`,
    ]) {
      const out = await run({ url });
      expect(out.hops[0]?.error, url).toMatch(/capsule refused|not http|credentials/);
      expect(out.body).toBeUndefined();
    }
    expect(granted.connections).toBe(grantedBefore);
    const redirect = await run({ url: `http://api.test:${granted.port}/redirect`, follow: true });
    expect(redirect.hops[0]?.status).toBe(302);
    expect(redirect.hops[1]?.error).toMatch(/capsule refused GET evil\.test/);
    expect(denied.connections).toBe(0);
    expect(other.connections).toBe(0);
  });

  it('the request and byte caps hold', async () => {
    const seen = granted.requests.length;
    const capped = await run(
      { url: `http://api.test:${granted.port}/redirect`, follow: true },
      { networkRequests: 1 },
    );
    expect(capped.hops[1]?.error).toMatch(/limits\.networkRequests/);
    expect(granted.requests.length - seen).toBe(1);
    const big = await run({ url: `http://api.test:${granted.port}/big` }, { networkBytes: 10_000 });
    expect(big.hops[0]?.error).toMatch(/limits\.networkBytes/);
    expect(big.body).toBeUndefined();
  });

  it('a request still in flight when the run times out is cut (the host does not keep talking for it)', async () => {
    let closed!: () => void;
    const socketClosed = new Promise<void>((resolve) => (closed = resolve));
    const hanging = await listen((req) => {
      // Never answers; the effect judged is capsule closing the connection when the run ends.
      req.socket.once('close', () => closed());
    });
    try {
      const { capability } = await wasmCapability('fetch', FETCH_WASM, {
        manifest: {
          limits: { timeoutMs: 1500 },
          grants: { network: [{ host: 'api.test', ports: [hanging.port], internal: ['127.0.0.1'] }] },
        },
      });
      const r = await runner.run(
        {
          capability,
          input: JSON.stringify({ url: `http://api.test:${hanging.port}/` }),
        },
        permitFor(capability),
      );
      expect(r.timedOut).toBe(true);
      await socketClosed;
      expect(hanging.requests).toHaveLength(1);
    } finally {
      await hanging.close();
    }
  });

  it('hostile component: Host override, header injection, CONNECT, an oversized body and a request flood', async () => {
    const source = `
      import { fetch } from 'capsule:capability/http@0.1.0';
      const attempt = (req) => {
        try { const r = fetch(req); return r.status; } catch (e) { return 'refused: ' + String(e); }
      };
      export function run(input) {
        const { port } = JSON.parse(input);
        const url = 'http://api.test:' + port + '/';
        const out = {};
        out.hostOverride = attempt({ method: 'GET', url, headers: [['host', 'evil.test'], ['x-test', 'override']], body: null });
        out.injection = attempt({ method: 'GET', url, headers: [['x-a', 'b\\r\\nhost: evil.test']], body: null });
        out.connect = attempt({ method: 'CONNECT', url, headers: [], body: null });
        out.bigBody = attempt({ method: 'POST', url, headers: [], body: new Uint8Array(20000) });
        let flood = 0;
        for (let i = 0; i < 50; i++) if (attempt({ method: 'GET', url, headers: [], body: null }) === 200) flood++;
        out.flood = flood;
        return JSON.stringify(out);
      }`;
    const { componentizeJs } = await import('../../../src/runners/wasm/componentize.js');
    const built = await componentizeJs(source, { file: 'hostile.js' });
    const { capability } = await wasmCapability('hostile', built.component, {
      manifest: {
        limits: { timeoutMs: 20_000, networkRequests: 10, networkBytes: 10_000 },
        grants: { network: [{ host: 'api.test', ports: [granted.port], internal: ['127.0.0.1'] }] },
      },
    });
    const seen = granted.requests.length;
    const r = await runner.run(
      { capability, input: JSON.stringify({ port: granted.port }) },
      permitFor(capability),
    );
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(out.hostOverride).toBe(200);
    expect(out.injection).toMatch(/^refused: .*line break/);
    expect(out.connect).toMatch(/^refused: .*CONNECT/);
    expect(out.bigBody).toMatch(/^refused: .*limits\.networkBytes/);
    // 10 requests allowed in all: the Host override, the oversized body (counted, then refused) and 8 of the flood.
    expect(out.flood).toBe(8);
    const mine = granted.requests.slice(seen);
    expect(mine.every((q) => q.host === `api.test:${granted.port}`)).toBe(true);
    expect(mine).toHaveLength(9);
    expect(denied.connections).toBe(0);
  });

  it('without grants.network the http interface refuses and nothing is reached', async () => {
    const before = granted.connections;
    const { capability } = await wasmCapability('fetch', FETCH_WASM);
    const r = await runner.run(
      {
        capability,
        input: JSON.stringify({ url: `http://api.test:${granted.port}/` }),
      },
      permitFor(capability),
    );
    expect(JSON.parse(r.stdout)).toMatchObject({
      hops: [{ error: expect.stringMatching(/no grants\.network/) as unknown }],
    });
    expect(granted.connections).toBe(before);
  });

  it('a preview1 module with grants.network is refused before it runs', async () => {
    const { capability } = await wasmCapability('probe', assemble('probe.wat'), {
      manifest: {
        grants: { network: [{ host: 'api.test', ports: [granted.port], internal: ['127.0.0.1'] }] },
      },
    });
    await expect(runner.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'UNSUPPORTED',
      details: { field: 'grants.network' },
    });
  });
});
