// Docker runner latency: a bare, hardened dockerode create→attach→start→wait→remove (the naive floor)
// vs capsule's default path (a fresh container per call, created ahead by the prewarm pool) vs
// reset-reusable containers (docker.reusable). Measured alternately in one process so noise hits all three.
import { mintRunnerPermit } from '../dist/runners/permit.js';
import Docker from 'dockerode';
import { PassThrough } from 'node:stream';
import { benchCapability } from './capability.mjs';
import { stats } from './stats.mjs';

export async function benchDocker({ root, iterations = 30 }) {
  const { DockerRunner } = await import('../dist/runners/docker/runner.js');
  const { DockerodeEngine } = await import('../dist/runners/docker/dockerode-engine.js');
  const { ImageBuilder } = await import('../dist/runners/docker/images.js');

  const engine = new DockerodeEngine({ env: process.env });
  await new ImageBuilder({ engine }).ensure('capsule/busybox:1');
  const base = await benchCapability(root, 'hello-docker');
  const reusable = {
    ...base,
    manifest: { ...base.manifest, docker: { ...base.manifest.docker, reusable: true } },
  };
  const input = '{"name":"bench"}';

  const docker = new Docker();
  const limits = base.manifest.limits;
  async function bare() {
    const c = await docker.createContainer({
      Image: 'capsule/busybox:1',
      Cmd: ['/bin/sh', '/capability/hello.sh'],
      WorkingDir: '/capability',
      User: '65534:65534',
      Labels: { 'capsule.managed': '1', 'capsule.pid': String(process.pid), 'capsule.host': 'bench' },
      OpenStdin: true,
      StdinOnce: true,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      NetworkDisabled: true,
      HostConfig: {
        NetworkMode: 'none',
        ReadonlyRootfs: true,
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        Memory: limits.memoryMb * 1024 * 1024,
        MemorySwap: limits.memoryMb * 1024 * 1024,
        PidsLimit: limits.pids,
        NanoCpus: 1e9,
        Ulimits: [{ Name: 'nofile', Soft: 1024, Hard: 1024 }],
        Tmpfs: { '/tmp': 'rw,noexec,nosuid,nodev,size=16m,mode=1777' },
        Mounts: [{ Type: 'bind', Source: base.dir, Target: '/capability', ReadOnly: true }],
        LogConfig: { Type: 'none', Config: {} },
      },
    });
    const stream = await c.attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true });
    const out = new PassThrough();
    docker.modem.demuxStream(stream, out, new PassThrough());
    let text = '';
    out.on('data', (d) => (text += d));
    await c.start();
    stream.end(input);
    const r = await c.wait();
    await c.remove({ force: true });
    if (r.StatusCode !== 0 || !text.includes('hello'))
      throw new Error(`bare run failed: ${r.StatusCode} ${text}`);
  }

  const fresh = new DockerRunner({ env: process.env, engine, prewarm: 1 });
  const warm = new DockerRunner({ env: process.env, engine, prewarm: 0 });
  const samples = { bare: [], fresh: [], warm: [] };
  const timed = async (fn) => {
    const t = performance.now();
    await fn();
    return performance.now() - t;
  };
  const check = (r) => {
    if (r.exitCode !== 0 || !r.stdout.includes('hello'))
      throw new Error(`capsule run failed: ${JSON.stringify(r)}`);
  };
  try {
    for (let i = 0; i < iterations + 3; i++) {
      const b = await timed(bare);
      const f = await timed(async () =>
        check(await fresh.run({ capability: base, input }, mintRunnerPermit(base))),
      );
      const w = await timed(async () =>
        check(await warm.run({ capability: reusable, input }, mintRunnerPermit(reusable))),
      );
      // Let background removals and prewarms settle so they do not bill the next sample.
      await new Promise((r) => setTimeout(r, 150));
      if (i >= 3) {
        samples.bare.push(b);
        samples.fresh.push(f);
        samples.warm.push(w);
      }
    }
  } finally {
    await fresh.close();
    await warm.close();
  }
  // Under load: calls back to back (no pause for the pool to refill) and 4 callers at once, on the default
  // path and on reset-reusable containers (docker.reusable). Each row's median is wall time per call
  // (total / calls), against the same bare floor; the calls/s rows are the same runs as throughput.
  const loadRows = [];
  const BARE = 'docker: bare dockerode hardened create+attach+start+wait+remove';
  const calls = Math.max(16, iterations * 2);
  async function load(label, capability, callers) {
    const runner = new DockerRunner({ env: process.env, engine });
    try {
      // Warm-up at the same concurrency: the pool has seen this configuration and sized itself to the demand.
      for (let i = 0; i < 8; i++)
        await Promise.all(
          Array.from({ length: callers }, async () =>
            check(await runner.run({ capability, input }, mintRunnerPermit(capability))),
          ),
        );
      await new Promise((r) => setTimeout(r, 300));
      const each = [];
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: callers }, async () => {
          for (let i = 0; i < Math.ceil(calls / callers); i++)
            each.push(
              await timed(async () =>
                check(await runner.run({ capability, input }, mintRunnerPermit(capability))),
              ),
            );
        }),
      );
      const wall = performance.now() - t0;
      const perCall = wall / each.length;
      const latency = stats(each);
      loadRows.push(
        {
          name: `docker: ${label}, wall per call`,
          n: each.length,
          median: perCall,
          p95: latency.p95,
          floor: BARE,
        },
        {
          name: `docker: ${label}, calls/s`,
          n: each.length,
          median: perCall,
          p95: undefined,
          perSecond: 1000 / perCall,
        },
        { name: `docker: ${label}, latency per call`, ...latency, floor: BARE },
      );
    } finally {
      await runner.close();
    }
  }
  await load('default, back-to-back', base, 1);
  await load('default, 4 concurrent callers', base, 4);
  await load('reset-reusable, back-to-back', reusable, 1);
  await load('reset-reusable, 4 concurrent callers', reusable, 4);

  // gVisor, when the engine has it: the same default path under runsc (fewer rounds: it is slower).
  const gvisorRows = [];
  if ((await engine.info()).runtimes.includes('runsc')) {
    const gvisor = {
      ...base,
      manifest: { ...base.manifest, docker: { ...base.manifest.docker, runtime: 'runsc' } },
    };
    const runsc = new DockerRunner({ env: process.env, engine, prewarm: 1 });
    const times = [];
    try {
      for (let i = 0; i < Math.min(iterations, 15) + 2; i++) {
        const t = await timed(async () =>
          check(await runsc.run({ capability: gvisor, input }, mintRunnerPermit(gvisor))),
        );
        await new Promise((r) => setTimeout(r, 150));
        if (i >= 2) times.push(t);
      }
    } finally {
      await runsc.close();
    }
    gvisorRows.push({
      name: 'docker: capsule default on gVisor (runsc)',
      ...stats(times),
      floor: 'docker: bare dockerode hardened create+attach+start+wait+remove',
    });
  }
  return [
    {
      name: 'docker: bare dockerode hardened create+attach+start+wait+remove',
      isFloor: true,
      ...stats(samples.bare),
    },
    {
      name: 'docker: capsule default (fresh container, prewarmed)',
      ...stats(samples.fresh),
      floor: 'docker: bare dockerode hardened create+attach+start+wait+remove',
    },
    {
      name: 'docker: capsule reset-reusable (docker.reusable, reset and verified between calls)',
      ...stats(samples.warm),
      floor: 'docker: bare dockerode hardened create+attach+start+wait+remove',
    },
    ...loadRows,
    ...gvisorRows,
  ];
}

// Standalone: node bench/docker.mjs (after npm run build).
if (import.meta.url === `file://${process.argv[1]}`) {
  const { fileURLToPath } = await import('node:url');
  const path = await import('node:path');
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rows = await benchDocker({ root, iterations: Number(process.env.ITERATIONS ?? 30) });
  const byName = new Map(rows.map((r) => [r.name, r]));
  for (const r of rows) {
    const floor = r.floor === undefined ? undefined : byName.get(r.floor);
    const tail =
      r.perSecond !== undefined
        ? `${r.perSecond.toFixed(1)} calls/s`
        : `median ${r.median.toFixed(0)} ms  p95 ${r.p95 === undefined ? '-' : r.p95.toFixed(0)} ms${floor ? `  ${(r.median / floor.median).toFixed(2)}x bare` : ''}`;
    process.stdout.write(`${r.name.padEnd(72)} ${tail}\n`);
  }
}
