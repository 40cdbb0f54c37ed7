// Engine pool and Swarm: one call on the pool of two engines vs the same call on one engine (latency), and four callers
// at once on two engines vs on one (throughput), and a call through the Swarm runner vs a bare service. Needs the extra engines (bash scripts/extra-engines.sh up);
// without them the suite says so and adds no rows. Both engines run on this machine, so "two engines" shares
// its cores: the rows measure the pool's overhead and scheduling, not the capacity of a second host.
import { mintRunnerPermit } from '../dist/runners/permit.js';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { benchCapability } from './capability.mjs';
import { stats } from './stats.mjs';

export async function benchPool({ root, iterations = 20 }) {
  const enginesRoot = process.env.CAPSULE_ENGINES_ROOT ?? '/var/lib/capsule-engines';
  let index;
  try {
    index = JSON.parse(await readFile(path.join(enginesRoot, 'engines.json'), 'utf8'));
  } catch {
    process.stderr.write('bench: pool skipped (no extra engines: bash scripts/extra-engines.sh up)\n');
    return [];
  }
  const { DockerRunner } = await import('../dist/runners/docker/runner.js');
  const { EnginePool } = await import('../dist/runners/docker/engine-pool.js');
  const { DockerodeEngine } = await import('../dist/runners/docker/dockerode-engine.js');
  const capability = await benchCapability(root, 'hello-docker');
  const input = '{"name":"bench"}';
  const connect = (name) => new DockerodeEngine({ host: index.engines[name].host });
  const check = (r) => {
    if (r.exitCode !== 0 || !r.stdout.includes('hello'))
      throw new Error(`pool bench call failed: ${JSON.stringify(r)}`);
  };
  const timed = async (fn) => {
    const t = performance.now();
    await fn();
    return performance.now() - t;
  };
  const one = new DockerRunner({ env: process.env, engine: connect('pool-a') });
  const pool = new EnginePool([
    { name: 'pool-a', engine: connect('pool-a') },
    { name: 'pool-b', engine: connect('pool-b') },
  ]);
  const samples = { one: [], pool: [] };
  const throughput = {};
  try {
    // Each call after a pause (the previous call's refill, a container created and started ahead, settles
    // first) and in alternating order: a call made right after the other row's would pay for that refill.
    const settle = () => new Promise((r) => setTimeout(r, 150));
    for (let i = 0; i < iterations + 3; i++) {
      const order = i % 2 === 0 ? ['one', 'pool'] : ['pool', 'one'];
      const took = {};
      for (const k of order) {
        const runner = k === 'one' ? one : pool;
        took[k] = await timed(async () =>
          check(await runner.run({ capability, input }, mintRunnerPermit(capability))),
        );
        await settle();
      }
      if (i >= 3) {
        samples.one.push(took.one);
        samples.pool.push(took.pool);
      }
    }
    const calls = Math.max(16, iterations * 2);
    for (const [label, runner] of [
      ['one', one],
      ['pool', pool],
    ]) {
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let i = 0; i < calls / 4; i++)
            check(await runner.run({ capability, input }, mintRunnerPermit(capability)));
        }),
      );
      throughput[label] = (performance.now() - t0) / calls;
    }
  } finally {
    await one.close();
    await pool.close();
  }
  const swarmRows = await benchSwarm({
    index,
    capability,
    input,
    check,
    timed,
    iterations: Math.min(iterations, 8),
  });
  const ONE = 'pool: a call on one engine (DockerRunner)';
  const FOUR_ONE = 'pool: 4 callers on one engine, wall per call';
  return [
    { name: ONE, isFloor: true, ...stats(samples.one) },
    { name: 'pool: a call on the pool of two engines', ...stats(samples.pool), floor: ONE },
    {
      name: FOUR_ONE,
      n: calls(iterations),
      median: throughput.one,
      p95: undefined,
      perSecond: 1000 / throughput.one,
      isFloor: true,
    },
    {
      name: 'pool: 4 callers on two engines, wall per call',
      n: calls(iterations),
      median: throughput.pool,
      p95: undefined,
      perSecond: 1000 / throughput.pool,
      floor: FOUR_ONE,
    },
    ...swarmRows,
  ];
}

/** A call through the Swarm runner vs a bare dockerode service create → complete → logs → remove. */
async function benchSwarm({ index, capability, input, check, timed, iterations }) {
  if (index.engines['swarm-m'] === undefined) return [];
  const { default: Docker } = await import('dockerode');
  const { SwarmRunner } = await import('../dist/runners/docker/swarm-runner.js');
  const { DockerodeEngine } = await import('../dist/runners/docker/dockerode-engine.js');
  const host = index.engines['swarm-m'].host;
  const docker = new Docker({ socketPath: host.replace('unix://', '') });
  const runner = new SwarmRunner({ manager: new DockerodeEngine({ host }) });
  async function bare() {
    const service = await docker.createService({
      Name: `bench-bare-${process.pid}-${Math.random().toString(16).slice(2)}`,
      Labels: { 'capsule.managed': '1', 'capsule.pid': String(process.pid) },
      TaskTemplate: {
        ContainerSpec: {
          Image: 'capsule/busybox:1',
          Command: ['/bin/echo', 'hello bench'],
          User: '65534:65534',
        },
        RestartPolicy: { Condition: 'none' },
      },
      Mode: { Replicated: { Replicas: 1 } },
    });
    const id = service.id ?? service.ID;
    try {
      for (;;) {
        const [task] = await docker.listTasks({ filters: { service: [id] } });
        if (task !== undefined && ['complete', 'failed', 'rejected', 'shutdown'].includes(task.Status?.State))
          break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const logs = await docker.getService(id).logs({ stdout: true, stderr: true, follow: false });
      if (!String(logs).includes('hello')) throw new Error('bare service printed nothing');
    } finally {
      await docker.getService(id).remove();
    }
  }
  const samples = { bare: [], swarm: [] };
  for (let i = 0; i < iterations + 1; i++) {
    const b = await timed(bare);
    const s = await timed(async () =>
      check(await runner.run({ capability, input }, mintRunnerPermit(capability))),
    );
    if (i >= 1) {
      samples.bare.push(b);
      samples.swarm.push(s);
    }
  }
  await runner.close();
  const BARE = 'swarm: bare service create→complete→logs→remove';
  return [
    { name: BARE, isFloor: true, ...stats(samples.bare) },
    {
      name: 'swarm: a call through the Swarm runner (configs, service, logs, cleanup)',
      ...stats(samples.swarm),
      floor: BARE,
    },
  ];
}

function calls(iterations) {
  return Math.max(16, iterations * 2);
}

// Standalone: node bench/pool.mjs (after npm run build and scripts/extra-engines.sh up).
if (import.meta.url === `file://${process.argv[1]}`) {
  const { fileURLToPath } = await import('node:url');
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rows = await benchPool({ root, iterations: Number(process.env.ITERATIONS ?? 20) });
  const byName = new Map(rows.map((r) => [r.name, r]));
  for (const r of rows) {
    const floor = r.floor === undefined ? undefined : byName.get(r.floor);
    process.stdout.write(
      `${r.name.padEnd(52)} median ${r.median.toFixed(0)} ms${r.p95 === undefined ? '' : `  p95 ${r.p95.toFixed(0)} ms`}${r.perSecond ? `  ${r.perSecond.toFixed(1)} calls/s` : ''}${floor ? `  ${(r.median / floor.median).toFixed(2)}x floor` : ''}\n`,
    );
  }
}
