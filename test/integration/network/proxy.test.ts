import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import type net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EgressSession } from '../../../src/network/egress.js';
import { type EgressRecord } from '../../../src/permissions/types.js';
import { startEgressProxy, type EgressProxy } from '../../../src/network/proxy.js';
import { egressCapability as capability, listen, mapResolver, type Listener } from './loopback.js';

// The egress proxy alone, with real sockets on loopback: every denial is judged by the listener that
// would have been reached (its accepted-connection count), never by the error text alone.

/** One request over the proxy's unix socket, as capability code in a container would send it. */
function viaSocket(
  socketPath: string,
  options: http.RequestOptions,
  body?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, ...options }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

function connectVia(socketPath: string, authority: string): Promise<{ status: number; socket: net.Socket }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method: 'CONNECT', path: authority });
    req.on('connect', (res, socket) =>
      resolve({ status: res.statusCode ?? 0, socket: socket as net.Socket }),
    );
    req.on('response', (res) => resolve({ status: res.statusCode ?? 0, socket: res.socket as net.Socket }));
    req.on('error', reject);
    req.end();
  });
}

describe('egress proxy (loopback listeners, injected resolver)', () => {
  let granted: Listener;
  let denied: Listener;
  let otherPort: Listener;
  let dir: string;
  const open: Array<{ proxy: EgressProxy; session: EgressSession }> = [];

  beforeAll(async () => {
    denied = await listen();
    granted = await listen((req, res) => {
      if (req.url === '/redirect') {
        res.writeHead(302, { location: `http://evil.test:${denied.port}/` });
        res.end();
      } else if (req.url === '/big') {
        res.end('x'.repeat(64 * 1024));
      } else if (req.method === 'POST') {
        let n = 0;
        req.on('data', (c: Buffer) => (n += c.length));
        req.on('end', () => res.end(`got ${n}`));
      } else res.end(`hello ${req.method ?? ''} ${req.headers.host ?? ''}`);
    });
    otherPort = await listen();
    dir = await mkdtemp(path.join(tmpdir(), 'capsule-proxy-test-'));
  });

  afterEach(async () => {
    for (const { proxy, session } of open.splice(0)) {
      await proxy.close();
      await session.close();
    }
    denied.connections = 0;
    otherPort.connections = 0;
    granted.connections = 0;
  });

  afterAll(async () => {
    await Promise.all([granted.close(), denied.close(), otherPort.close()]);
    await rm(dir, { recursive: true, force: true });
  });

  async function start(
    network: unknown,
    options: { limits?: Record<string, number>; map?: Record<string, string | string[]> } = {},
  ): Promise<{ socket: string; records: EgressRecord[]; session: EgressSession }> {
    const records: EgressRecord[] = [];
    const session = new EgressSession({
      capability: capability(network, options.limits),
      resolve: mapResolver(options.map ?? { 'api.test': '127.0.0.1', 'evil.test': '127.0.0.1' }),
      audit: (r) => {
        records.push(r);
        return Promise.resolve();
      },
    });
    const socket = path.join(dir, `p${open.length}-${Math.random().toString(36).slice(2)}.sock`);
    const proxy = await startEgressProxy(session, socket);
    open.push({ proxy, session });
    return { socket, records, session };
  }

  const apiGrant = (): unknown => [{ host: 'api.test', ports: [granted.port], internal: ['127.0.0.1'] }];

  it('a granted host answers (absolute-form and curl --unix-socket origin-form), each request audited', async () => {
    const { socket, records, session } = await start(apiGrant());
    const a = await viaSocket(socket, {
      path: `http://api.test:${granted.port}/`,
      headers: { host: `api.test:${granted.port}` },
    });
    expect(a).toEqual({ status: 200, body: `hello GET api.test:${granted.port}` });
    const b = await viaSocket(socket, {
      path: '/',
      method: 'HEAD',
      headers: { host: `api.test:${granted.port}` },
    });
    expect(b.status).toBe(200);
    await session.close();
    expect(records.map((r) => [r.decision, r.method, r.host, r.port, r.address])).toEqual([
      ['allow', 'GET', 'api.test', granted.port, '127.0.0.1'],
      ['allow', 'HEAD', 'api.test', granted.port, '127.0.0.1'],
    ]);
    expect(records[0]?.bytesIn).toBe(a.body.length);
  });

  it('an ungranted host, and a Host header naming one, never reach its listener', async () => {
    const { socket, records, session } = await start(apiGrant());
    expect((await viaSocket(socket, { path: `http://evil.test:${denied.port}/` })).status).toBe(403);
    expect(
      (await viaSocket(socket, { path: '/', headers: { host: `evil.test:${denied.port}` } })).status,
    ).toBe(403);
    // Absolute-form wins over a Host header that names the granted host.
    expect(
      (
        await viaSocket(socket, {
          path: `http://evil.test:${denied.port}/`,
          headers: { host: `api.test:${granted.port}` },
        })
      ).status,
    ).toBe(403);
    expect(denied.connections).toBe(0);
    await session.close();
    expect(records.map((r) => [r.decision, r.host])).toEqual([
      ['deny', 'evil.test'],
      ['deny', 'evil.test'],
      ['deny', 'evil.test'],
    ]);
  });

  it('IP literals in every spelling are refused unless granted by name', async () => {
    const { socket } = await start(apiGrant());
    for (const host of ['127.0.0.1', '2130706433', '0x7f.1', '127.1', '[::ffff:127.0.0.1]', '[::1]']) {
      const r = await viaSocket(socket, { path: `http://${host}:${granted.port}/` });
      expect(r.status, host).toBe(403);
    }
    const c = await connectVia(socket, `127.0.0.1:${granted.port}`);
    expect(c.status).toBe(403);
    c.socket.destroy();
    expect(granted.connections).toBe(0);
  });

  it('an IP literal granted by name is reachable (and names its own loopback address)', async () => {
    const { socket } = await start([{ host: '127.0.0.1', ports: [granted.port] }]);
    expect((await viaSocket(socket, { path: `http://127.0.0.1:${granted.port}/` })).status).toBe(200);
    // Another spelling of the same address is the same host.
    expect((await viaSocket(socket, { path: `http://2130706433:${granted.port}/` })).status).toBe(200);
  });

  it('loopback is refused when the grant does not name it in internal', async () => {
    const { socket, records } = await start([{ host: 'api.test', ports: [granted.port] }]);
    expect((await viaSocket(socket, { path: `http://api.test:${granted.port}/` })).status).toBe(403);
    expect(granted.connections).toBe(0);
    expect(records[0]?.reason).toMatch(/loopback address/);
  });

  it('a name answering with an internal address among others is refused; the connection goes to the checked address', async () => {
    const mixed = await start([{ host: 'api.test', ports: [granted.port], internal: ['127.0.0.1'] }], {
      map: { 'api.test': ['127.0.0.1', '10.0.0.1'] },
    });
    expect((await viaSocket(mixed.socket, { path: `http://api.test:${granted.port}/` })).status).toBe(403);
    expect(granted.connections).toBe(0);
    // Rebinding: the resolver answers the checked address once, then something else; capsule connects
    // to what it checked and never looks the name up again.
    let calls = 0;
    const records: EgressRecord[] = [];
    const session = new EgressSession({
      capability: capability([{ host: 'api.test', ports: [granted.port], internal: ['127.0.0.1'] }]),
      resolve: () => Promise.resolve([{ address: calls++ === 0 ? '127.0.0.1' : '10.9.9.9', family: 4 }]),
      audit: (r) => (records.push(r), Promise.resolve()),
    });
    const sock = path.join(dir, 'rebind.sock');
    const proxy = await startEgressProxy(session, sock);
    open.push({ proxy, session });
    expect((await viaSocket(sock, { path: `http://api.test:${granted.port}/` })).status).toBe(200);
    expect(calls).toBe(1);
  });

  it('a CONNECT to another port of the granted host is refused; the granted port tunnels', async () => {
    const { socket } = await start(apiGrant());
    const other = await connectVia(socket, `api.test:${otherPort.port}`);
    expect(other.status).toBe(403);
    other.socket.destroy();
    expect(otherPort.connections).toBe(0);
    const ok = await connectVia(socket, `api.test:${granted.port}`);
    expect(ok.status).toBe(200);
    const answer = await new Promise<string>((resolve) => {
      let text = '';
      ok.socket.on('data', (c: Buffer) => {
        text += c.toString();
        if (text.includes('hello')) resolve(text);
      });
      ok.socket.write(`GET / HTTP/1.1\r\nhost: api.test\r\nconnection: close\r\n\r\n`);
    });
    expect(answer).toMatch(/hello GET api\.test/);
    ok.socket.destroy();
  });

  it('a redirect to an ungranted host is passed back; following it is refused and reaches nothing', async () => {
    const { socket } = await start(apiGrant());
    const first = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request(
        { socketPath: socket, path: `http://api.test:${granted.port}/redirect` },
        resolve,
      );
      req.on('error', reject);
      req.end();
    });
    first.resume();
    expect(first.statusCode).toBe(302);
    const location = first.headers.location ?? '';
    expect((await viaSocket(socket, { path: location })).status).toBe(403);
    expect(denied.connections).toBe(0);
  });

  it('methods: only listed methods pass, and a tunnel is refused (capsule cannot see its method)', async () => {
    const { socket } = await start([
      { host: 'api.test', ports: [granted.port], methods: ['GET'], internal: ['127.0.0.1'] },
    ]);
    expect((await viaSocket(socket, { path: `http://api.test:${granted.port}/` })).status).toBe(200);
    const before = granted.connections;
    expect(
      (await viaSocket(socket, { path: `http://api.test:${granted.port}/`, method: 'POST' }, 'data')).status,
    ).toBe(403);
    const tunnel = await connectVia(socket, `api.test:${granted.port}`);
    expect(tunnel.status).toBe(403);
    tunnel.socket.destroy();
    expect(granted.connections).toBe(before);
  });

  it('the request cap: past limits.networkRequests nothing more goes out', async () => {
    const { socket, records } = await start(apiGrant(), { limits: { networkRequests: 2 } });
    for (let i = 0; i < 2; i++)
      expect((await viaSocket(socket, { path: `http://api.test:${granted.port}/` })).status).toBe(200);
    const seen = granted.requests.length;
    expect((await viaSocket(socket, { path: `http://api.test:${granted.port}/` })).status).toBe(403);
    expect(granted.requests.length).toBe(seen);
    expect(records.at(-1)?.reason).toMatch(/limits\.networkRequests/);
  });

  it('the byte cap: a response past limits.networkBytes is cut, and the next request is refused', async () => {
    const { socket, records, session } = await start(apiGrant(), { limits: { networkBytes: 10_000 } });
    const big = await viaSocket(socket, { path: `http://api.test:${granted.port}/big` }).catch(() => ({
      status: -1,
      body: '',
    }));
    expect(big.body.length).toBeLessThan(64 * 1024);
    const seen = granted.requests.length;
    expect((await viaSocket(socket, { path: `http://api.test:${granted.port}/` })).status).toBe(403);
    expect(granted.requests.length).toBe(seen);
    await session.close();
    expect(records.some((r) => r.decision === 'allow' && /networkBytes/.test(r.reason))).toBe(true);
    const bytes = records.reduce((n, r) => n + r.bytesIn + r.bytesOut, 0);
    expect(bytes).toBeLessThanOrEqual(10_000 + 64 * 1024);
  });

  it('smuggling variants: credentials, userinfo hosts, https in the forward proxy, bad authorities, upgrades', async () => {
    const { socket } = await start(apiGrant());
    for (const [options, status] of [
      // userinfo naming the granted host, real host the denied one
      [{ path: `http://api.test:${granted.port}@evil.test:${denied.port}/` }, 400],
      [{ path: '/', headers: { host: `api.test:${granted.port}@evil.test:${denied.port}` } }, 400],
      [{ path: `https://api.test:${granted.port}/` }, 400],
      [{ path: '/', headers: { host: 'api.test:99999' } }, 400],
      [{ path: `http://evil.test:${denied.port}/`, headers: { host: `api.test:${granted.port}` } }, 403],
      [{ path: `http://EVIL.test.:${denied.port}/` }, 403],
      [{ path: `http://api.test.evil.test:${denied.port}/` }, 403],
    ] as const) {
      expect((await viaSocket(socket, options)).status, JSON.stringify(options)).toBe(status);
    }
    for (const authority of [
      `api.test:${granted.port}@evil.test:${denied.port}`,
      'api.test',
      `evil.test:${denied.port}`,
      `[::1]:${granted.port}`,
    ]) {
      const c = await connectVia(socket, authority);
      expect(c.status, authority).toBeGreaterThanOrEqual(400);
      c.socket.destroy();
    }
    // A websocket-style upgrade is not proxied, even to the granted host.
    const upgraded = await new Promise<number | string>((resolve) => {
      const req = http.request({
        socketPath: socket,
        path: `http://api.test:${granted.port}/`,
        headers: { connection: 'upgrade', upgrade: 'websocket' },
      });
      req.on('upgrade', () => resolve('upgraded'));
      req.on('response', (res) => resolve(res.statusCode ?? 0));
      req.on('error', () => resolve('closed'));
      req.end();
    });
    expect(upgraded).not.toBe('upgraded');
    expect(denied.connections).toBe(0);
  });

  it('hop-by-hop and proxy headers are not forwarded', async () => {
    const { socket } = await start(apiGrant());
    const seen: Array<Record<string, string | string[] | undefined>> = [];
    const echo = await listen((req, res) => {
      seen.push(req.headers);
      res.end('ok');
    });
    try {
      const records: EgressRecord[] = [];
      const session = new EgressSession({
        capability: capability([{ host: 'api.test', ports: [echo.port], internal: ['127.0.0.1'] }]),
        resolve: mapResolver({ 'api.test': '127.0.0.1' }),
        audit: (r) => (records.push(r), Promise.resolve()),
      });
      const sock = path.join(dir, 'headers.sock');
      const proxy = await startEgressProxy(session, sock);
      open.push({ proxy, session });
      await viaSocket(sock, {
        path: `http://api.test:${echo.port}/`,
        headers: {
          'proxy-authorization': 'Basic c2VjcmV0',
          connection: 'x-drop',
          'x-drop': '1',
          'x-keep': '2',
        },
      });
      expect(seen[0]?.['proxy-authorization']).toBeUndefined();
      expect(seen[0]?.['x-drop']).toBeUndefined();
      expect(seen[0]?.['x-keep']).toBe('2');
      expect(seen[0]?.host).toBe(`api.test:${echo.port}`);
    } finally {
      await echo.close();
    }
    void socket;
  });

  it('a request body counts against the byte cap too', async () => {
    const { socket } = await start(apiGrant(), { limits: { networkBytes: 1000 } });
    const r = await viaSocket(
      socket,
      { path: `http://api.test:${granted.port}/`, method: 'POST' },
      'y'.repeat(5000),
    ).catch(() => ({ status: -1, body: '' }));
    expect(r.body).not.toBe('got 5000');
  });
});
