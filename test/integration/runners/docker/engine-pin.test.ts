import http from 'node:http';
import { mkdtemp, rename, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { pinnedConnections } from '../../../../src/runners/docker/engine-pin.js';

// The connections a measurement is bound to, against two stand-in daemons on unix sockets (each logs every
// request it receives): one holds the canary, the other does not. Judged by the daemons' own logs.

const CANARY = 'capsule-cap-test-p1-x-pin-0123456789abcdef';

interface FakeDaemon {
  socket: string;
  /** Every request it received, as `METHOD path`. */
  log: string[];
  close(): Promise<void>;
}

async function fakeDaemon(
  dir: string,
  name: string,
  hasCanary: boolean,
  chunked = false,
): Promise<FakeDaemon> {
  const socket = path.join(dir, `${name}.sock`);
  const log: string[] = [];
  const server = http.createServer((req, res) => {
    log.push(`${req.method ?? ''} ${req.url ?? ''}`);
    if (req.url === `/volumes/${CANARY}`) {
      if (!hasCanary) {
        res.writeHead(404, { 'Content-Type': 'application/json' });
        res.end('{"message":"no such volume"}');
        return;
      }
      const body = JSON.stringify({ Name: CANARY, Labels: { 'capsule.role': 'pin' } });
      if (chunked) {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.write(body.slice(0, 10));
        res.end(body.slice(10));
      } else {
        res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
        res.end(body);
      }
      return;
    }
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': 2 });
    res.end(`${name.slice(0, 1)}!`);
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  return {
    socket,
    log,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function get(agent: http.Agent, socketPath: string, p: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, path: p, agent }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve(text));
    });
    req.on('error', reject);
    req.end();
  });
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(options: { chunked?: boolean } = {}) {
  const dir = await mkdtemp(path.join(tmpdir(), 'capsule-pin-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const measured = await fakeDaemon(dir, 'measured', true, options.chunked);
  const other = await fakeDaemon(dir, 'other', false);
  cleanups.push(measured.close, other.close);
  const link = path.join(dir, 'engine.sock');
  await symlink(measured.socket, link);
  const repoint = async (to: string): Promise<void> => {
    await symlink(to, `${link}.next`);
    await rename(`${link}.next`, link);
  };
  const pinned = pinnedConnections({ tls: false, where: `unix://${link}` });
  cleanups.push(async () => pinned.agent.destroy());
  return { measured, other, link, repoint, pinned };
}

describe('connections bound to the daemon measured', () => {
  it('a connection is used only once its daemon shows the canary; one that reaches another daemon carries nothing', async () => {
    const { measured, other, link, repoint, pinned } = await setup();
    pinned.arm(CANARY);
    expect(await get(pinned.agent, link, '/info')).toBe('m!');
    expect(measured.log).toEqual([`GET /volumes/${CANARY}`, 'GET /info']);

    await repoint(other.socket);
    // Two at once: one may reuse the kept-alive connection (still the measured daemon's), the other is new.
    const results = await Promise.allSettled([
      get(pinned.agent, link, '/containers/create'),
      get(pinned.agent, link, '/containers/create'),
    ]);
    // The other daemon was asked for the canary and nothing else.
    expect(other.log).toEqual([`GET /volumes/${CANARY}`]);
    expect(results.some((r) => r.status === 'rejected')).toBe(true);
    expect(pinned.lost()).toMatch(/another daemon answers at unix:\/\/.*engine\.sock/);
    // Lost: nothing more is sent anywhere, not even to the daemon measured.
    await repoint(measured.socket);
    const before = measured.log.length;
    await expect(get(pinned.agent, link, '/info')).rejects.toThrow(/another daemon/);
    expect(measured.log.length).toBe(before);
  });

  it('control: unarmed, the same requests go to whichever daemon the path leads to', async () => {
    const { other, link, repoint, pinned } = await setup();
    await repoint(other.socket);
    expect(await get(pinned.agent, link, '/containers/create')).toBe('o!');
    expect(other.log).toEqual(['GET /containers/create']);
  });

  it('a chunked canary answer is read whole, and the connection then carries the request', async () => {
    const { measured, link, pinned } = await setup({ chunked: true });
    pinned.arm(CANARY);
    expect(await get(pinned.agent, link, '/_ping')).toBe('m!');
    expect(measured.log).toEqual([`GET /volumes/${CANARY}`, 'GET /_ping']);
    expect(pinned.lost()).toBeUndefined();
  });

  it('connections opened before the pin are closed by it, never used unchecked', async () => {
    const { measured, other, link, repoint, pinned } = await setup();
    expect(await get(pinned.agent, link, '/_ping')).toBe('m!');
    await repoint(other.socket);
    pinned.arm(CANARY);
    await expect(get(pinned.agent, link, '/info')).rejects.toThrow(/another daemon/);
    expect(other.log).toEqual([`GET /volumes/${CANARY}`]);
    expect(measured.log).toEqual(['GET /_ping']);
  });

  it('a daemon that goes away: the next connection fails and loses the pin', async () => {
    const { measured, link, pinned } = await setup();
    pinned.arm(CANARY);
    expect(await get(pinned.agent, link, '/_ping')).toBe('m!');
    await measured.close();
    await expect(get(pinned.agent, link, '/_ping')).rejects.toThrow();
    expect(pinned.lost()).toMatch(/failed|another daemon|closed/);
  });
});
