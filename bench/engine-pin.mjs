// What binding a posture measurement to its daemon costs (docs/scale-out.md#posture-is-bound-to-the-daemon):
// - per call, the check before it runs (pin.check(): in memory plus a stat of the unix socket path), against
//   asking the daemon who it is (GET /info) and against GET /_ping;
// - per new connection, the canary request (GET /volumes/NAME on a fresh connection) against a bare fresh
//   connection with GET /_ping;
// - a whole call as the executor makes it (measureIsolation, then run) on one pooled engine, against the same
//   pool with the binding switched off.
// Needs the extra engines (bash scripts/extra-engines.sh up); without them the suite says so and adds no rows.
import { mintRunnerPermit } from '../dist/runners/permit.js';
import http from 'node:http';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { benchCapability } from './capability.mjs';
import { stats } from './stats.mjs';

export async function benchEnginePin({ root, iterations = 20 }) {
  const enginesRoot = process.env.CAPSULE_ENGINES_ROOT ?? '/var/lib/capsule-engines';
  let index;
  try {
    index = JSON.parse(await readFile(path.join(enginesRoot, 'engines.json'), 'utf8'));
  } catch {
    process.stderr.write('bench: engine-pin skipped (no extra engines: bash scripts/extra-engines.sh up)\n');
    return [];
  }
  const { EnginePool } = await import('../dist/runners/docker/engine-pool.js');
  const { DockerodeEngine } = await import('../dist/runners/docker/dockerode-engine.js');
  const { canaryVolume } = await import('../dist/runners/docker/volumes.js');
  const { processOwner } = await import('../dist/runners/docker/labels.js');
  const host = index.engines['pool-b'].host;
  const socketPath = host.slice('unix://'.length);
  const timed = async (fn) => {
    const t = performance.now();
    await fn();
    return performance.now() - t;
  };
  const get = (p, agent) =>
    new Promise((resolve, reject) => {
      const req = http.request({ socketPath, path: p, agent }, (res) => {
        res.resume();
        res.on('end', resolve);
      });
      req.on('error', reject);
      req.end();
    });

  const rows = [];
  // Per call: the check in front of every call vs asking the daemon.
  const engine = new DockerodeEngine({ host });
  const pin = await engine.pin(canaryVolume(processOwner()));
  const kept = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const micro = { check: [], info: [], ping: [] };
  const N = Math.max(200, iterations * 10);
  try {
    for (let i = 0; i < N + 20; i++) {
      const a = await timed(() => pin.check());
      const b = await timed(() => get('/info', kept));
      const c = await timed(() => get('/_ping', kept));
      if (i >= 20) {
        micro.check.push(a);
        micro.info.push(b);
        micro.ping.push(c);
      }
    }
    // Per new connection: the canary request on it vs a bare new connection asked for /_ping.
    const fresh = { canary: [], ping: [] };
    for (let i = 0; i < N + 20; i++) {
      const a = await timed(() => get(`/volumes/${pin.identity.canary}`, false));
      const b = await timed(() => get('/_ping', false));
      if (i >= 20) {
        fresh.canary.push(a);
        fresh.ping.push(b);
      }
    }
    const INFO = 'engine-pin: GET /info on a kept-alive connection (who the daemon is, asked per call)';
    const PING = 'engine-pin: a new connection + GET /_ping';
    rows.push(
      { name: INFO, isFloor: true, ...stats(micro.info) },
      {
        name: 'engine-pin: the check before each call (pin.check: a stat of the socket)',
        ...stats(micro.check),
        floor: INFO,
      },
      { name: 'engine-pin: GET /_ping on a kept-alive connection', ...stats(micro.ping), floor: INFO },
      { name: PING, isFloor: true, ...stats(fresh.ping) },
      {
        name: 'engine-pin: a new connection checked for the canary (GET /volumes/NAME)',
        ...stats(fresh.canary),
        floor: PING,
      },
    );
  } finally {
    kept.destroy();
    await pin.release();
  }

  // A whole call as the executor makes it (ask the pool, then run), on one engine: bound, and the same pool with
  // the binding switched off (a pin that checks nothing), alternating.
  const capability = await benchCapability(root, 'hello-docker');
  const input = '{"name":"bench"}';
  const check = (r) => {
    if (r.exitCode !== 0 || !r.stdout.includes('hello'))
      throw new Error(`engine-pin bench call failed: ${JSON.stringify(r)}`);
  };
  const unbound = (inner) =>
    new Proxy(inner, {
      get: (target, prop, receiver) =>
        prop === 'pin'
          ? async () => ({
              identity: { canary: '' },
              check: async () => undefined,
              lose() {},
              release: async () => {},
            })
          : prop === 'another'
            ? undefined
            : Reflect.get(target, prop, receiver),
    });
  const pools = {
    bound: new EnginePool([{ name: 'b', engine: new DockerodeEngine({ host }) }]),
    free: new EnginePool([{ name: 'b', engine: unbound(new DockerodeEngine({ host })) }]),
  };
  const calls = { bound: [], free: [] };
  try {
    for (let i = 0; i < iterations * 2 + 3; i++) {
      for (const k of i % 2 === 0 ? ['bound', 'free'] : ['free', 'bound']) {
        const d = await timed(async () => {
          if ((await pools[k].measureIsolation()) !== undefined)
            throw new Error('pool-b measured as not sandboxed');
          check(
            await pools[k].run({ capability, input, requireSandboxed: true }, mintRunnerPermit(capability)),
          );
        });
        if (i >= 3) calls[k].push(d);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  } finally {
    await pools.bound.close();
    await pools.free.close();
  }
  const FREE = 'engine-pin: a call on a pooled engine, binding off (measure + run)';
  rows.push(
    { name: FREE, isFloor: true, ...stats(calls.free) },
    { name: 'engine-pin: the same call bound to the daemon measured', ...stats(calls.bound), floor: FREE },
  );
  return rows;
}
