import { cp, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EgressRecord } from '../../../src/permissions/types.js';
import type { DockerodeEngine } from '../../../src/runners/docker/dockerode-engine.js';
import { DockerRunner } from '../../../src/runners/docker/runner.js';
import { dockerForTests, tempCapability } from '../runners/docker/helpers.js';
import { listen, mapResolver, type Listener } from './loopback.js';
import { permitFor, withPermit } from '../../helpers/permit.js';

// A node capability in a --network none container reaching a loopback listener through capsule's
// per-run egress proxy, and nothing else. Judged by the listeners' accepted-connection counts.
const EXAMPLE = fileURLToPath(new URL('../../../capabilities/fetch-docker/', import.meta.url));
const ATTACK = fileURLToPath(new URL('./attack.mjs', import.meta.url));

describe('docker egress through capsule’s proxy', () => {
  let engine: DockerodeEngine;
  let runner: DockerRunner;
  let granted: Listener;
  let denied: Listener;
  let other: Listener;
  const records: EgressRecord[] = [];
  const audit = (r: EgressRecord): Promise<void> => (records.push(r), Promise.resolve());
  const mine = `capsule.pid=${process.pid}`;

  beforeAll(async () => {
    ({ engine } = await dockerForTests());
    // The test build's resolver: names to loopback, handed to the runner, never in a manifest.
    runner = new DockerRunner({
      env: process.env,
      engine,
      prewarm: 0,
      egressResolver: mapResolver({ 'api.test': '127.0.0.1', 'evil.test': '127.0.0.1' }),
    });
    denied = await listen();
    other = await listen();
    granted = await listen((req, res) => {
      if (req.url === '/redirect') {
        res.writeHead(302, { location: `http://evil.test:${denied.port}/` });
        res.end();
      } else res.end(`hello from the granted host (${req.method ?? ''})`);
    });
  });

  afterAll(async () => {
    await runner.close();
    await Promise.all([granted.close(), denied.close(), other.close()]);
    expect(await engine.listContainers([mine])).toEqual([]);
  });

  async function example(limits: Record<string, number> = {}): ReturnType<typeof tempCapability> {
    const manifest = JSON.parse(await readFile(path.join(EXAMPLE, 'capability.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    const made = await tempCapability(
      'fetch-docker',
      {
        ...manifest,
        limits: { ...(manifest.limits as object), ...limits },
        // Loopback is internal: granted explicitly, the way a user grants an internal host.
        grants: { network: [{ host: 'api.test', ports: [granted.port], internal: ['127.0.0.1'] }] },
      },
      {},
    );
    for (const f of ['egress.mjs', 'main.mjs']) await cp(path.join(EXAMPLE, f), path.join(made.dir, f));
    await cp(ATTACK, path.join(made.dir, 'attack.mjs'));
    return made;
  }

  it('the shipped example fetches from the granted host; the request is audited', async () => {
    const made = await example();
    try {
      const before = records.length;
      const r = await runner.run(
        {
          capability: made.capability,
          input: JSON.stringify({ url: `http://api.test:${granted.port}/` }),
          egressAudit: audit,
        },
        permitFor(made.capability),
      );
      expect(r.stderr).toBe('');
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toContain('hello from the granted host (GET)');
      const mineNow = records.slice(before);
      expect(mineNow).toHaveLength(1);
      expect(mineNow[0]).toMatchObject({
        decision: 'allow',
        host: 'api.test',
        port: granted.port,
        method: 'GET',
        address: '127.0.0.1',
      });
      expect(mineNow[0]?.bytesIn).toBeGreaterThan(0);
    } finally {
      await made.cleanup();
    }
  });

  it('a redirect to an ungranted host is refused when followed; its listener sees no connection', async () => {
    const made = await example();
    try {
      const r = await runner.run(
        {
          capability: made.capability,
          input: JSON.stringify({ url: `http://api.test:${granted.port}/redirect`, follow: true }),
          egressAudit: audit,
        },
        permitFor(made.capability),
      );
      expect(r.stdout).toMatch(/^302 /m);
      expect(r.stdout).toMatch(/^403 http:\/\/evil\.test/m);
      expect(r.exitCode).toBe(2);
      expect(denied.connections).toBe(0);
    } finally {
      await made.cleanup();
    }
  });

  it('hostile code: direct sockets, ungranted hosts, IP literals and CONNECT to another port all fail and reach nothing', async () => {
    const made = await example();
    try {
      const grantedBefore = granted.connections;
      const before = records.length;
      const r = await runner.run(
        ...withPermit({
          capability: {
            ...made.capability,
            manifest: { ...made.capability.manifest, entry: 'attack.mjs' },
            entryPath: path.join(made.dir, 'attack.mjs'),
          },
          input: JSON.stringify({ port: granted.port, denied: denied.port, other: other.port }),
          egressAudit: audit,
        }),
      );
      expect(r.stderr).toBe('');
      const out = JSON.parse(r.stdout) as Record<string, unknown>;
      expect(out.directGranted).toMatch(/^error:/);
      expect(out.directDenied).toMatch(/^error:/);
      expect(out.directByName).toMatch(/^error:/);
      expect(out.ungranted).toBe(403);
      expect(out.hostHeader).toBe(403);
      expect(out.ipLiteral).toBe(403);
      expect(out.connectOtherPort).toBe(403);
      expect(out.connectIp).toBe(403);
      expect(out.granted).toBe(200);
      expect(denied.connections).toBe(0);
      expect(other.connections).toBe(0);
      // Only the one granted request reached the granted listener.
      expect(granted.connections - grantedBefore).toBe(1);
      const decisions = records.slice(before).map((x) => `${x.decision} ${x.method} ${x.host}:${x.port}`);
      expect(decisions.filter((d) => d.startsWith('deny'))).toHaveLength(5);
      expect(decisions.filter((d) => d.startsWith('allow'))).toEqual([`allow GET api.test:${granted.port}`]);
    } finally {
      await made.cleanup();
    }
  });

  it('a request still open when the run times out is cut when the proxy closes', async () => {
    let closed!: () => void;
    const socketClosed = new Promise<void>((resolve) => (closed = resolve));
    const hanging = await listen((req) => req.socket.once('close', () => closed()));
    const made = await example({ timeoutMs: 3000 });
    try {
      const capability = {
        ...made.capability,
        manifest: {
          ...made.capability.manifest,
          grants: {
            ...made.capability.manifest.grants,
            network: [{ host: 'api.test', ports: [hanging.port], internal: ['127.0.0.1'] }],
          },
        },
      };
      const r = await runner.run(
        {
          capability,
          input: JSON.stringify({ url: `http://api.test:${hanging.port}/` }),
          egressAudit: audit,
        },
        permitFor(capability),
      );
      expect(r.timedOut).toBe(true);
      await socketClosed;
      expect(hanging.requests).toHaveLength(1);
    } finally {
      await made.cleanup();
      await hanging.close();
    }
  });

  it('the request cap holds inside the container', async () => {
    const made = await example({ networkRequests: 1 });
    try {
      const seen = granted.requests.length;
      const r = await runner.run(
        {
          capability: made.capability,
          input: JSON.stringify({ url: `http://api.test:${granted.port}/redirect`, follow: true }),
          egressAudit: audit,
        },
        permitFor(made.capability),
      );
      // The first request is the only one; the followed hop is refused by the cap before any lookup.
      expect(granted.requests.length - seen).toBe(1);
      expect(r.stdout).toMatch(/^403 /m);
      expect(records.at(-1)?.reason).toMatch(/limits\.networkRequests/);
    } finally {
      await made.cleanup();
    }
  });
});
