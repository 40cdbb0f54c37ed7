// Wasm runner: warm calls through capsule (worker pool, fresh instance per call) vs the bare
// instantiate-and-call floor in-process, cold first calls, and throughput with every worker busy.
// Usage: import { benchWasm } from './wasm.mjs' (bench/run.mjs), or `node bench/wasm.mjs` after `npm run build`.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { openSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WASI } from 'node:wasi';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { instantiateCores, ownMemory, recordLinkPlan } from './component-floor.mjs';
import { stats } from './stats.mjs';

export async function benchWasm({ root, dist = path.join(root, 'dist'), iterations = 200 }) {
  const { WasmRunner } = await import(path.join(dist, 'runners/wasm/wasm-runner.js'));
  const { ModuleCache } = await import(path.join(dist, 'runners/wasm/module-cache.js'));
  const { executeJob } = await import(path.join(dist, 'runners/wasm/worker.js'));
  const shoutFile = path.join(root, 'capabilities/shout-wasm/shout.wasm');
  const helloFile = path.join(root, 'capabilities/hello/hello.wasm');
  const shout = await readFile(shoutFile);
  const hello = await readFile(helloFile);
  const input = Buffer.from('{"text":"hello"}');
  const spec = (file, bytes, extra = {}) => ({
    file,
    bytes,
    programName: 'bench',
    args: [],
    env: {},
    input: file === helloFile ? Buffer.from('{"name":"bench"}') : input,
    dirs: [],
    timeoutMs: 10_000,
    memoryMb: 64,
    outputBytes: 1 << 20,
    ...extra,
  });
  const rows = [];

  // Cold: a new runner (new workers, empty caches, no disk cache) and its first call.
  for (const [label, file, bytes] of [
    ['preview1 module', shoutFile, shout],
    ['component (transpile included)', helloFile, hello],
  ]) {
    const runner = new WasmRunner({ poolSize: 1 });
    const t = performance.now();
    const r = await runner.runRaw(spec(file, bytes));
    const ms = performance.now() - t;
    if (r.exitCode !== 0) throw new Error(`cold ${label} failed: ${Buffer.from(r.stderr)}`);
    await runner.close();
    rows.push({ name: `wasm: cold first call, ${label}`, n: 1, median: ms, p95: ms });
  }
  // Cold with a warm disk cache (a new CLI process after the first): the component skips the transpile.
  {
    const cacheDir = await mkdtemp(path.join(os.tmpdir(), 'capsule-bench-'));
    const first = new WasmRunner({ poolSize: 1, cacheDir });
    await first.runRaw(spec(helloFile, hello));
    await first.close();
    const runner = new WasmRunner({ poolSize: 1, cacheDir });
    const t = performance.now();
    await runner.runRaw(spec(helloFile, hello));
    const ms = performance.now() - t;
    await runner.close();
    await rm(cacheDir, { recursive: true, force: true });
    rows.push({ name: 'wasm: cold first call, component from disk cache', n: 1, median: ms, p95: ms });
  }

  // Floors, in-process: a cached WebAssembly.Module, a fresh instance per call.
  const cache = new ModuleCache({});
  const shoutPrepared = await cache.prepare(shout, { file: shoutFile, capPages: 1024 });
  const helloPrepared = await cache.prepare(hello, { file: helloFile, capPages: 1024 });
  const devNull = openSync('/dev/null', 'r+');
  const bareModule = () => {
    const wasi = new WASI({
      version: 'preview1',
      args: ['bench'],
      env: {},
      stdin: devNull,
      stdout: devNull,
      stderr: devNull,
      returnOnExit: true,
    });
    const instance = new WebAssembly.Instance(shoutPrepared.module, {
      wasi_snapshot_preview1: wasi.wasiImport,
      ...ownMemory(shoutPrepared),
    });
    return wasi.start(instance);
  };
  const moduleJob = {
    kind: 'module',
    key: shoutPrepared.key,
    code: { module: shoutPrepared.module, memory: shoutPrepared.memory },
    args: ['bench'],
    env: {},
    stdin: input,
    preopens: [],
    outputBytes: 1 << 20,
    writeBytes: 64 * 1024 * 1024,
    maxPages: 1024,
  };
  const componentJob = {
    kind: 'component',
    key: helloPrepared.key,
    code: { jsUrl: helloPrepared.jsUrl, modules: helloPrepared.modules, memories: helloPrepared.memories },
    input: '{"name":"bench"}',
    args: ['bench'],
    env: {},
    preopens: [],
    outputBytes: 1 << 20,
    writeBytes: 64 * 1024 * 1024,
    maxPages: 1024,
  };
  // Two workers, as `min(2, cores)` gives here; the rows below say "2 workers".
  const runner = new WasmRunner({ poolSize: 2 });
  await runner.warm();

  // preview1: floor, guards in-process, and the pool, interleaved call by call.
  {
    const samples = { bare: [], inproc: [], ours: [] };
    for (let i = 0; i < iterations + 10; i++) {
      let t = performance.now();
      bareModule();
      const b = performance.now() - t;
      t = performance.now();
      await executeJob(i, moduleJob);
      const ip = performance.now() - t;
      t = performance.now();
      const r = await runner.runRaw(spec(shoutFile, shout));
      const o = performance.now() - t;
      if (Buffer.from(r.stdout).toString() !== '{"TEXT":"HELLO"}')
        throw new Error('shout-wasm gave the wrong output');
      if (i >= 10) {
        samples.bare.push(b);
        samples.inproc.push(ip);
        samples.ours.push(o);
      }
    }
    const floor = 'wasm: bare preview1 instantiate+call (node:wasi, in-process)';
    rows.push(
      { name: floor, isFloor: true, ...stats(samples.bare) },
      { name: "wasm: preview1 with capsule's preview1 host, in-process", ...stats(samples.inproc), floor },
      { name: 'wasm: capsule warm call, preview1 (worker pool)', ...stats(samples.ours), floor },
    );
  }

  // Components: the floor is instantiating the same core modules, linked as the glue links them.
  const glue = await import(helloPrepared.jsUrl);
  const plan = recordLinkPlan(glue, helloPrepared.modules, helloPrepared.memories);
  const coreFloor = `wasm: bare core instantiate, the component's ${plan.length} core modules (in-process)`;
  {
    // The first job hands the code over; later ones carry only its key, as the pool sends them.
    await executeJob(0, componentJob);
    const warmJob = { ...componentJob, code: undefined };
    const samples = { core: [], inproc: [], ours: [] };
    for (let i = 0; i < iterations + 10; i++) {
      let t = performance.now();
      instantiateCores(plan);
      const k = performance.now() - t;
      t = performance.now();
      const cr = await executeJob(i, warmJob);
      const ip = performance.now() - t;
      t = performance.now();
      const c = await runner.runRaw(spec(helloFile, hello));
      const o = performance.now() - t;
      if (cr.type !== 'done' || Buffer.from(c.stdout).toString() !== 'Hello, bench!\n')
        throw new Error('hello gave the wrong output');
      if (i >= 10) {
        samples.core.push(k);
        samples.inproc.push(ip);
        samples.ours.push(o);
      }
    }
    rows.push(
      { name: coreFloor, isFloor: true, ...stats(samples.core) },
      {
        name: 'wasm: component instantiate+call, in-process (glue + capsule host, fresh instance)',
        ...stats(samples.inproc),
        floor: coreFloor,
      },
      {
        name: 'wasm: capsule warm call, component (worker pool, fresh instance per call)',
        ...stats(samples.ours),
        floor: coreFloor,
      },
    );
  }

  // Throughput: many calls in flight, both workers busy.
  const throughput = async (label, file, bytes, count, floor) => {
    const t = performance.now();
    await Promise.all(Array.from({ length: count }, () => runner.runRaw(spec(file, bytes))));
    const s = (performance.now() - t) / 1000;
    rows.push({
      name: `wasm: throughput, ${label}, 2 workers busy`,
      n: count,
      median: (s * 1000) / count,
      p95: undefined,
      perSecond: count / s,
      floor,
    });
  };
  await throughput('preview1', shoutFile, shout, 2000, undefined);
  // Its floor: the same core instantiations on 2 threads at once (no glue, host, call or hop).
  const floorCount = 1000;
  const floorWorkers = [0, 1].map(
    () =>
      new Worker(new URL('./component-floor.mjs', import.meta.url), {
        workerData: {
          componentFloor: true,
          jsUrl: helloPrepared.jsUrl,
          modules: helloPrepared.modules,
          memories: helloPrepared.memories,
          count: floorCount / 2,
        },
      }),
  );
  await Promise.all(floorWorkers.map((w) => once(w, 'message')));
  const t0 = performance.now();
  await Promise.all(floorWorkers.map((w) => (w.postMessage('go'), once(w, 'message'))));
  const floorS = (performance.now() - t0) / 1000;
  await Promise.all(floorWorkers.map((w) => w.terminate()));
  const tputFloor = 'wasm: throughput floor, bare core instantiate of the component, 2 threads busy';
  rows.push({
    name: tputFloor,
    isFloor: true,
    n: floorCount,
    median: (floorS * 1000) / floorCount,
    p95: undefined,
    perSecond: floorCount / floorS,
  });
  await throughput('component (fresh instance per call)', helloFile, hello, 1000, tputFloor);
  await runner.close();
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rows = await benchWasm({ root, dist: process.env.CAPSULE_DIST ?? path.join(root, 'dist') });
  for (const r of rows) {
    const floor = r.floor ? rows.find((f) => f.name === r.floor) : undefined;
    const extra =
      (floor ? `  ${(r.median / floor.median).toFixed(2)}× floor` : '') +
      (r.perSecond ? `  ${Math.round(r.perSecond)} calls/s` : '');
    console.log(
      `${r.name.padEnd(86)} median ${r.median.toFixed(3)} ms${r.p95 !== undefined ? `  p95 ${r.p95.toFixed(3)} ms` : ''}${extra}`,
    );
  }
}
