// Network egress: one granted request through each of capsule's paths vs a bare request to the same
// loopback listener (the floor), measured alternately in one process so noise hits all of them.
// Paths: the docker egress proxy on its unix socket (forward proxy and CONNECT tunnel, as capability code
// in a container uses it) and a warm Wasm component call whose fetch goes through capsule's host.
import { mintRunnerPermit } from '../dist/runners/permit.js';
import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { benchCapability } from './capability.mjs';
import { stats } from './stats.mjs';

function get(options) {
  return new Promise((resolve, reject) => {
    const req = http.request({ agent: false, ...options }, (res) => {
      res.resume();
      res.on('end', () =>
        res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

function tunnelGet(socketPath, port) {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method: 'CONNECT', path: `api.test:${port}` });
    req.on('connect', (res, socket) => {
      if (res.statusCode !== 200) return reject(new Error(`CONNECT ${res.statusCode}`));
      let text = '';
      socket.on('data', (c) => (text += c));
      socket.on('end', () =>
        text.startsWith('HTTP/1.1 200') ? resolve() : reject(new Error(text.slice(0, 40))),
      );
      socket.write('GET / HTTP/1.1\r\nhost: api.test\r\nconnection: close\r\n\r\n');
    });
    req.on('error', reject);
    req.end();
  });
}

export async function benchEgress({ root, iterations = 200 }) {
  const { EgressSession } = await import('../dist/network/egress.js');
  const { startEgressProxy } = await import('../dist/network/proxy.js');
  const { WasmRunner } = await import('../dist/runners/wasm/wasm-runner.js');

  const server = http.createServer((_req, res) => res.end('ok'));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = server.address().port;
  // Bench names map to the listener, as in the tests: never a real lookup.
  const resolve = (host) =>
    host === 'api.test'
      ? Promise.resolve([{ address: '127.0.0.1', family: 4 }])
      : Promise.reject(new Error('unmapped'));

  const capability = await benchCapability(root, 'fetch-wasm', (text) => ({
    ...text,
    grants: { network: [{ host: 'api.test', ports: [port], internal: ['127.0.0.1'] }] },
    limits: { ...text.limits, networkRequests: 100_000, networkBytes: 1024 * 1024 * 1024 },
  }));
  const session = new EgressSession({ capability, resolve });
  const socketDir = await mkdtemp(path.join(tmpdir(), 'capsule-bench-egress-'));
  const socketPath = path.join(socketDir, 'egress.sock');
  const proxy = await startEgressProxy(session, socketPath);
  const runner = new WasmRunner({ poolSize: 1, egressResolver: resolve });
  const input = JSON.stringify({ url: `http://api.test:${port}/` });
  const wasmCall = async () => {
    const r = await runner.run({ capability, input }, mintRunnerPermit(capability));
    if (!r.stdout.includes('"status":200')) throw new Error(`wasm fetch failed: ${r.stdout}${r.stderr}`);
  };

  const samples = { bare: [], forward: [], connect: [], wasm: [] };
  const timed = async (list, fn) => {
    const t0 = performance.now();
    await fn();
    list.push(performance.now() - t0);
  };
  try {
    // Warm-up: the component is transpiled and cached in the worker, sockets are warm.
    for (let i = 0; i < 5; i++) {
      await wasmCall();
      await get({ host: '127.0.0.1', port });
    }
    const wasmIterations = Math.max(20, Math.round(iterations / 4));
    for (let i = 0; i < iterations; i++) {
      await timed(samples.bare, () => get({ host: '127.0.0.1', port, path: '/' }));
      await timed(samples.forward, () =>
        get({ socketPath, path: `http://api.test:${port}/`, headers: { host: `api.test:${port}` } }),
      );
      await timed(samples.connect, () => tunnelGet(socketPath, port));
      if (i < wasmIterations) await timed(samples.wasm, wasmCall);
    }
  } finally {
    await runner.close();
    await proxy.close();
    await session.close();
    await rm(socketDir, { recursive: true, force: true });
    await new Promise((r) => server.close(r));
  }
  const floor = 'egress: bare HTTP request to a loopback listener';
  return [
    { name: floor, isFloor: true, ...stats(samples.bare) },
    {
      name: 'egress: docker proxy (unix socket, forward proxy), one granted request',
      ...stats(samples.forward),
      floor,
    },
    {
      name: 'egress: docker proxy (unix socket, CONNECT tunnel), one granted request',
      ...stats(samples.connect),
      floor,
    },
    { name: 'egress: wasm component warm call with one granted fetch', ...stats(samples.wasm), floor },
  ];
}
