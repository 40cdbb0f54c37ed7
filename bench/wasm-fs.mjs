// Wasm preview1 on a granted folder: capsule's own preview1 host (every path confined by
// ConfinedDir, on the folder itself) vs node:wasi on the same folder, call by call in the same run.
// The guest is fixtures/wasm/probe.wat (`read FILE`: path_open, fd_read to the end, fd_close),
// assembled with wabt. Usage: bench/run.mjs, or `node bench/wasm-fs.mjs` after `npm run build`.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { openSync, closeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WASI } from 'node:wasi';
import wabtInit from 'wabt';
import { ownMemory } from './component-floor.mjs';
import { stats } from './stats.mjs';

export async function benchWasmFs({ root, dist = path.join(root, 'dist'), iterations = 200 }) {
  const { WasmRunner } = await import(path.join(dist, 'runners/wasm/wasm-runner.js'));
  const { ModuleCache } = await import(path.join(dist, 'runners/wasm/module-cache.js'));
  const { executeJob } = await import(path.join(dist, 'runners/wasm/worker.js'));
  const wabt = await wabtInit();
  const wat = await readFile(path.join(root, 'fixtures/wasm/probe.wat'), 'utf8');
  const probe = wabt.parseWat('probe.wat', wat).toBinary({}).buffer;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'capsule-bench-fs-'));
  const payload = Buffer.alloc(64 * 1024, 'x');
  await writeFile(path.join(dir, 'data.txt'), payload);
  const args = ['probe', 'read', 'data.txt'];
  const cache = new ModuleCache({});
  const prepared = await cache.prepare(probe, { file: 'probe.wasm', capPages: 256 });
  const rows = [];
  try {
    // node:wasi on the folder, in-process: what the preview1 runner used to build on (unconfined;
    // stdout to /dev/null, where capsule's host keeps it in memory).
    const sink = openSync('/dev/null', 'w');
    const nodeWasi = () => {
      const wasi = new WASI({
        version: 'preview1',
        args,
        env: {},
        preopens: { '/data': dir },
        stdout: sink,
        returnOnExit: true,
      });
      const instance = new WebAssembly.Instance(prepared.module, {
        wasi_snapshot_preview1: wasi.wasiImport,
        ...ownMemory(prepared),
      });
      return wasi.start(instance);
    };
    const job = {
      kind: 'module',
      key: prepared.key,
      code: { module: prepared.module, memory: prepared.memory },
      args,
      env: {},
      stdin: new Uint8Array(0),
      preopens: [{ guest: '/data', host: dir, readOnly: true }],
      hiddenNames: undefined,
      outputBytes: 1 << 20,
      writeBytes: 64 * 1024 * 1024,
      maxPages: prepared.maxPages,
    };
    const runner = new WasmRunner({ poolSize: 1 });
    await runner.warm();
    const spec = {
      file: 'probe.wasm',
      bytes: probe,
      programName: 'probe',
      args: args.slice(1),
      env: {},
      input: new Uint8Array(0),
      dirs: [{ hostPath: dir, guestPath: '/data', mode: 'ro' }],
      timeoutMs: 10_000,
      memoryMb: 16,
      outputBytes: 1 << 20,
    };
    const samples = { node: [], inproc: [], pool: [] };
    for (let i = 0; i < iterations + 10; i++) {
      let t = performance.now();
      if (nodeWasi() !== 0) throw new Error('node:wasi probe failed');
      const a = performance.now() - t;
      t = performance.now();
      const r = await executeJob(i, job);
      const b = performance.now() - t;
      t = performance.now();
      const p = await runner.runRaw(spec);
      const c = performance.now() - t;
      if (r.type !== 'done' || r.stdout.length !== payload.length || p.stdout.length !== payload.length)
        throw new Error(`capsule preview1 read failed: ${Buffer.from(p.stderr)}`);
      if (i >= 10) {
        samples.node.push(a);
        samples.inproc.push(b);
        samples.pool.push(c);
      }
    }
    await runner.close();
    closeSync(sink);
    const floor = 'wasm fs: node:wasi on the granted folder, read 64 KiB (in-process)';
    rows.push(
      { name: floor, isFloor: true, ...stats(samples.node) },
      {
        name: 'wasm fs: capsule preview1 host on the granted folder, read 64 KiB (in-process)',
        ...stats(samples.inproc),
        floor,
      },
      {
        name: 'wasm fs: capsule warm call, read 64 KiB from a ro grant (worker pool)',
        ...stats(samples.pool),
        floor,
      },
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rows = await benchWasmFs({ root, dist: process.env.CAPSULE_DIST ?? path.join(root, 'dist') });
  for (const r of rows) {
    const floor = r.floor ? rows.find((f) => f.name === r.floor) : undefined;
    const extra = floor ? `  ${(r.median / floor.median).toFixed(2)}× floor` : '';
    console.log(`${r.name.padEnd(84)} median ${r.median.toFixed(3)} ms  p95 ${r.p95.toFixed(3)} ms${extra}`);
  }
}
