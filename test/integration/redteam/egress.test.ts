import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Capability } from '../../../src/manifest/types.js';
import { EgressSession, type Resolver } from '../../../src/network/egress.js';
import { type EgressRecord } from '../../../src/permissions/types.js';
import { egressFetch } from '../../../src/network/fetch.js';
import { startEgressProxy, type EgressProxy } from '../../../src/network/proxy.js';
import { openDockerEgress } from '../../../src/runners/docker/egress.js';
import { egressCapability as capability, listen, mapResolver, type Listener } from '../network/loopback.js';

// Attacks on the egress proxy (what a container reaches at /run/capsule/egress.sock) and on the Wasm
// fetch, with real sockets on loopback. Each is judged by the listener that must not be reached (its
// accepted connections and the bytes it received) or by whether capsule tried to connect at all.

/** Raw bytes to the proxy socket; resolves with everything the proxy answered once it closes. */
function raw(
  socketPath: string,
  bytes: string | Buffer,
  settle?: (text: string) => boolean,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socketPath);
    let text = '';
    s.on('data', (c: Buffer) => {
      text += c.toString('latin1');
      if (settle?.(text) === true) s.destroy();
    });
    s.on('close', () => resolve(text));
    s.on('error', (err: NodeJS.ErrnoException) =>
      err.code === 'ECONNRESET' || err.code === 'EPIPE' ? resolve(text) : reject(err),
    );
    s.write(bytes);
  });
}

describe('red team: network egress', () => {
  let granted: Listener;
  let denied: Listener;
  let received = 0;
  let dir: string;
  const open: Array<{ proxy: EgressProxy; session: EgressSession }> = [];

  beforeAll(async () => {
    denied = await listen();
    granted = await listen((req, res) => {
      if (req.url === '/redirect') {
        res.writeHead(302, { location: `http://evil.test:${denied.port}/` });
        res.end();
        return;
      }
      req.on('data', (c: Buffer) => (received += c.length));
      req.on('end', () => res.end(`hello ${req.headers.host ?? ''}`));
    });
    dir = await mkdtemp(path.join(tmpdir(), 'capsule-redteam-egress-'));
  });

  afterEach(async () => {
    for (const { proxy, session } of open.splice(0)) {
      await proxy.close();
      await session.close();
    }
    denied.connections = 0;
    granted.connections = 0;
    denied.requests.length = 0;
    granted.requests.length = 0;
    received = 0;
  });

  afterAll(async () => {
    await Promise.all([granted.close(), denied.close()]);
    await rm(dir, { recursive: true, force: true });
  });

  const apiGrant = (): unknown => [{ host: 'api.test', ports: [granted.port], internal: ['127.0.0.1'] }];

  async function start(
    network: unknown,
    options: { limits?: Record<string, number>; resolve?: Resolver } = {},
  ): Promise<{ socket: string; records: EgressRecord[]; session: EgressSession }> {
    const records: EgressRecord[] = [];
    const session = new EgressSession({
      capability: capability(network, options.limits),
      resolve: options.resolve ?? mapResolver({ 'api.test': '127.0.0.1', 'evil.test': '127.0.0.1' }),
      audit: (r) => (records.push(r), Promise.resolve()),
    });
    const socket = path.join(dir, `p${Math.random().toString(36).slice(2)}.sock`);
    const proxy = await startEgressProxy(session, socket);
    open.push({ proxy, session });
    return { socket, records, session };
  }

  it('pipelining: a second request to another host on one keep-alive connection is checked on its own', async () => {
    const { socket } = await start(apiGrant());
    const text = await raw(
      socket,
      `GET http://api.test:${granted.port}/ HTTP/1.1\r\nhost: api.test:${granted.port}\r\n\r\n` +
        `GET http://evil.test:${denied.port}/ HTTP/1.1\r\nhost: evil.test:${denied.port}\r\n\r\n` +
        `GET / HTTP/1.1\r\nhost: evil.test:${denied.port}\r\nconnection: close\r\n\r\n`,
      (t) => (t.match(/HTTP\/1\.1 /g) ?? []).length >= 3,
    );
    expect(text).toMatch(/^HTTP\/1\.1 200/);
    expect(text).toMatch(/HTTP\/1\.1 403/);
    expect(denied.connections).toBe(0);
    expect(granted.requests.map((r) => r.host)).toEqual([`api.test:${granted.port}`]);
  });

  it('a second request smuggled in a body (Content-Length and Transfer-Encoding both) reaches no other host', async () => {
    const { socket } = await start(apiGrant());
    const inner = `GET http://evil.test:${denied.port}/ HTTP/1.1\r\nhost: evil.test:${denied.port}\r\n\r\n`;
    await raw(
      socket,
      `POST http://api.test:${granted.port}/ HTTP/1.1\r\nhost: api.test:${granted.port}\r\n` +
        `content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n${inner}`,
      (t) => /\r\n\r\n/.test(t),
    );
    // The same smuggling as a chunk body: the granted server gets it as data, nothing else is contacted.
    await raw(
      socket,
      `POST http://api.test:${granted.port}/ HTTP/1.1\r\nhost: api.test:${granted.port}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n` +
        `${inner.length.toString(16)}\r\n${inner}\r\n0\r\n\r\n`,
    );
    expect(denied.connections).toBe(0);
    expect(granted.requests.every((r) => r.host === `api.test:${granted.port}`)).toBe(true);
  });

  it('CONNECT to the granted host, then HTTP for another host inside the tunnel, reaches only the granted listener', async () => {
    const { socket } = await start(apiGrant());
    const text = await raw(
      socket,
      `CONNECT api.test:${granted.port} HTTP/1.1\r\nhost: api.test:${granted.port}\r\n\r\n` +
        `GET http://evil.test:${denied.port}/ HTTP/1.1\r\nhost: evil.test:${denied.port}\r\n\r\n` +
        `CONNECT evil.test:${denied.port} HTTP/1.1\r\nhost: evil.test:${denied.port}\r\n\r\n`,
      (t) => t.includes('hello'),
    );
    expect(text).toMatch(/^HTTP\/1\.1 200 Connection Established/);
    expect(denied.connections).toBe(0);
    // A CONNECT whose Host header names the granted host still goes by its authority.
    const second = await raw(
      socket,
      `CONNECT evil.test:${denied.port} HTTP/1.1\r\nhost: api.test:${granted.port}\r\n\r\n`,
    );
    expect(second).toMatch(/^HTTP\/1\.1 403/);
    expect(denied.connections).toBe(0);
  });

  it('a chunked upload past limits.networkBytes: the listener never receives more than the cap', async () => {
    const cap = 4096;
    const { socket } = await start(apiGrant(), { limits: { networkBytes: cap } });
    const chunk = 'x'.repeat(1000);
    let body = '';
    for (let i = 0; i < 64; i += 1) body += `${chunk.length.toString(16)}\r\n${chunk}\r\n`;
    await raw(
      socket,
      `POST http://api.test:${granted.port}/ HTTP/1.1\r\nhost: api.test:${granted.port}\r\ntransfer-encoding: chunked\r\n\r\n${body}0\r\n\r\n`,
    );
    expect(received).toBeLessThanOrEqual(cap);
    const before = granted.connections;
    // The cap is spent: the next request goes nowhere.
    await raw(
      socket,
      `GET http://api.test:${granted.port}/ HTTP/1.1\r\nhost: api.test\r\nconnection: close\r\n\r\n`,
    );
    expect(granted.connections).toBe(before);
  });

  it('IP literal spellings (octal, hex, mapped, long-form IPv6) never reach a loopback listener granted by name', async () => {
    const { socket } = await start(apiGrant());
    for (const host of [
      '0177.0.0.1',
      '0x7f000001',
      '127.0.1',
      '[0:0:0:0:0:ffff:7f00:1]',
      '[::ffff:7f00:1]',
      '[::127.0.0.1]',
      '0',
      '[::]',
      'localhost',
      'api.test.evil.test',
      'evil.test#api.test',
    ]) {
      await raw(
        socket,
        `GET http://${host}:${denied.port}/ HTTP/1.1\r\nhost: api.test\r\nconnection: close\r\n\r\n`,
      );
      await raw(socket, `CONNECT ${host}:${denied.port} HTTP/1.1\r\n\r\n`);
    }
    expect(denied.connections).toBe(0);
  });

  it('a very long header does not take the proxy down, and reaches no other host', async () => {
    const { socket } = await start(apiGrant());
    const text = await raw(
      socket,
      `GET http://evil.test:${denied.port}/ HTTP/1.1\r\nhost: api.test\r\nx-long: ${'a'.repeat(200_000)}\r\n\r\n`,
    );
    expect(text).not.toMatch(/^HTTP\/1\.1 200/);
    const after = await raw(
      socket,
      `GET http://api.test:${granted.port}/ HTTP/1.1\r\nhost: api.test\r\nconnection: close\r\n\r\n`,
    );
    expect(after).toMatch(/^HTTP\/1\.1 200/);
    expect(denied.connections).toBe(0);
  });

  it('Wasm fetch: a redirect is returned, not followed; CRLF in a header or the method adds no request', async () => {
    const session = new EgressSession({
      capability: capability(apiGrant()),
      resolve: mapResolver({ 'api.test': '127.0.0.1', 'evil.test': '127.0.0.1' }),
    });
    try {
      const r = await egressFetch(session, {
        method: 'GET',
        url: `http://api.test:${granted.port}/redirect`,
        headers: [],
      });
      expect(r.status).toBe(302);
      const injected = [
        { method: 'GET', headers: [['x-a', `b\r\nhost: evil.test:${denied.port}`]] as const },
        { method: 'GET', headers: [[`x-a: b\r\nhost`, `evil.test:${denied.port}`]] as const },
        { method: `GET http://evil.test:${denied.port}/ HTTP/1.1\r\nx:`, headers: [] },
      ];
      for (const { method, headers } of injected) {
        await egressFetch(session, { method, url: `http://api.test:${granted.port}/`, headers }).catch(
          () => undefined,
        );
      }
      await expect(
        egressFetch(session, { method: 'GET', url: `http://evil.test:${denied.port}/`, headers: [] }),
      ).rejects.toThrow();
      expect(denied.connections).toBe(0);
      expect(granted.requests.every((q) => q.host === `api.test:${granted.port}`)).toBe(true);
    } finally {
      await session.close();
    }
  });

  it('addresses that embed an IPv4 one (IPv4-compatible, SIIT, local-use NAT64, Teredo) are never connected to unnamed', async () => {
    // These route nowhere on this machine, so the effect judged is whether capsule connected at all:
    // an allowed record names the address it went to; a refusal is recorded before any socket exists.
    for (const address of [
      '::127.0.0.1',
      '::ffff:0:127.0.0.1',
      '64:ff9b:1::a00:1',
      '2001:0:4136:e378:8000:63bf:3fff:fdd2',
      'fec0::1',
    ]) {
      const { socket, records, session } = await start([{ host: 'api.test', ports: [granted.port] }], {
        resolve: () => Promise.resolve([{ address, family: 6 }]),
      });
      await raw(
        socket,
        `GET http://api.test:${granted.port}/ HTTP/1.1\r\nhost: api.test\r\nconnection: close\r\n\r\n`,
      );
      await session.close();
      expect(
        records.map((r) => [r.decision, r.address]),
        address,
      ).toEqual([['deny', undefined]]);
    }
  });
});

/**
 * Another local user (here the sandbox uid, 65534) hunting the temp folder for a running docker
 * capability's egress socket and sending a request through it: what it prints is how many it reached.
 */
const HUNTER = `
const fs = require('node:fs'), path = require('node:path'), http = require('node:http');
const found = [];
const walk = (d, depth) => { let es = []; try { es = fs.readdirSync(d, { withFileTypes: true }); } catch { return; }
  for (const e of es) { const p = path.join(d, e.name);
    if (!e.isDirectory()) continue;
    // A folder that cannot be listed can still be searched: the socket's name is known.
    try { if (fs.statSync(path.join(p, 'egress.sock')).isSocket()) found.push(path.join(p, 'egress.sock')); } catch {}
    if (depth < 2) walk(p, depth + 1); } };
walk(process.argv[1], 0);
let reached = 0;
Promise.all(found.map((socketPath) => new Promise((done) => {
  const req = http.request({ socketPath, path: process.argv[2], headers: { host: 'api.test' } }, (res) => {
    if (res.statusCode === 200) reached += 1; res.resume(); res.on('end', done); });
  req.on('error', done); req.end(); }))).then(() => console.log(JSON.stringify({ found: found.length, reached })));
`;

describe('red team: a run’s egress socket is its container’s alone', () => {
  it('another local user cannot find or use a running capability’s proxy socket', async () => {
    const listener = await listen();
    const cap = capability([{ host: 'api.test', ports: [listener.port], internal: ['127.0.0.1'] }]);
    const egress = await openDockerEgress(
      { ...cap, dir: '/nonexistent', manifestPath: '/nonexistent/capability.json' } as unknown as Capability,
      { resolve: mapResolver({ 'api.test': '127.0.0.1' }) },
    );
    try {
      if (egress === undefined) throw new Error('a capability with grants.network gets a proxy');
      // Control: through its own path the socket answers (the listener is reachable at all).
      const own = await new Promise<number>((resolve, reject) => {
        const req = net.connect(path.join(egress.dir, 'egress.sock'), () =>
          req.write(
            `GET http://api.test:${listener.port}/ HTTP/1.1\r\nhost: api.test\r\nconnection: close\r\n\r\n`,
          ),
        );
        let text = '';
        req.on('data', (c: Buffer) => (text += c.toString()));
        req.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0)));
        req.on('error', reject);
      });
      expect(own).toBe(200);
      const before = listener.connections;
      if (process.getuid?.() === 0) {
        const out = await new Promise<string>((resolve, reject) =>
          execFile(
            process.execPath,
            ['-e', HUNTER, tmpdir(), `http://api.test:${listener.port}/`],
            { uid: 65534, gid: 65534, cwd: '/' },
            (err, stdout) => (err ? reject(err) : resolve(stdout)),
          ),
        );
        expect(JSON.parse(out)).toEqual({ found: 0, reached: 0 });
        expect(listener.connections).toBe(before);
      }
      // Whoever runs the suite: nobody but capsule's user may enter the folder above the run's.
      expect((await stat(path.dirname(egress.dir))).mode & 0o077).toBe(0);
    } finally {
      await egress?.close();
      await listener.close();
    }
  });
});
