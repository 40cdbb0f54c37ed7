// capsule against the peers a user would pick instead, installed from npm as devDependencies and measured in
// the same run, interleaved call by call (each row's `peer` is the row it is divided by: capsule ÷ peer).
// - Wasm: @extism/extism, a fresh plugin per call (as capsule makes a fresh instance per call), with its own ABI
//   (bench/peers/shout-extism.wat: the same upper-casing as capabilities/shout-wasm) and with WASI enabled,
//   against capsule's preview1 warm call through its worker pool and its preview1 host in-process.
// - Shell: @anthropic-ai/sandbox-runtime (`srt`; bubblewrap, socat and ripgrep from scripts/provision-bench.sh),
//   wrapping and spawning the same script per call, against capsule's library call (lookup, gate, validation,
//   confined run) of capabilities/shout.
// A peer that cannot run here is skipped with a line saying why (its rows are absent).
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { stats } from './stats.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
/** A package's own version, from its package.json (not every package exports that file). */
const versionOf = async (name) =>
  JSON.parse(await readFile(path.join(here, '..', 'node_modules', name, 'package.json'), 'utf8')).version;

export async function benchPeers({ root, iterations = 200 }) {
  const rows = [];
  rows.push(...(await wasmRows(root, iterations)));
  rows.push(...(await shellRows(root, Math.max(20, Math.round(iterations / 8)))));
  return rows;
}

async function wasmRows(root, iterations) {
  let createPlugin;
  try {
    ({ default: createPlugin } = await import('@extism/extism'));
  } catch (err) {
    process.stderr.write(`bench: peers: Extism skipped (${err.message})\n`);
    return [];
  }
  const extism = `Extism JS SDK ${await versionOf('@extism/extism')}`;
  const { default: wabt } = await import('wabt');
  const wat = await readFile(path.join(root, 'bench', 'peers', 'shout-extism.wat'), 'utf8');
  const compiled = await WebAssembly.compile(
    (await wabt()).parseWat('shout-extism.wat', wat).toBinary({}).buffer,
  );
  const { WasmRunner } = await import('../dist/runners/wasm/wasm-runner.js');
  const { ModuleCache } = await import('../dist/runners/wasm/module-cache.js');
  const { executeJob } = await import('../dist/runners/wasm/worker.js');
  const shoutFile = path.join(root, 'capabilities/shout-wasm/shout.wasm');
  const shout = await readFile(shoutFile);
  const input = '{"text":"hello"}';
  const expected = '{"TEXT":"HELLO"}';
  const prepared = await new ModuleCache({}).prepare(shout, { file: shoutFile, capPages: 1024 });
  const job = {
    kind: 'module',
    key: prepared.key,
    code: { module: prepared.module, memory: prepared.memory },
    args: ['bench'],
    env: {},
    stdin: Buffer.from(input),
    preopens: [],
    outputBytes: 1 << 20,
    writeBytes: 64 * 1024 * 1024,
    maxPages: 1024,
  };
  const runner = new WasmRunner({ poolSize: 2 });
  await runner.warm();
  const spec = {
    file: shoutFile,
    bytes: shout,
    programName: 'bench',
    args: [],
    env: {},
    input: Buffer.from(input),
    dirs: [],
    timeoutMs: 10_000,
    memoryMb: 64,
    outputBytes: 1 << 20,
  };
  const fresh = async (useWasi) => {
    const plugin = await createPlugin(compiled, { useWasi });
    try {
      // A string, never a small Buffer: Extism hands the guest a Buffer's whole pool slab.
      const out = await plugin.call('shout', input);
      if (out?.text() !== expected) throw new Error(`Extism gave ${out?.text()}`);
    } finally {
      await plugin.close();
    }
  };
  const samples = { abi: [], wasi: [], pool: [], host: [] };
  const timed = async (fn) => {
    const t = performance.now();
    await fn();
    return performance.now() - t;
  };
  try {
    for (let i = 0; i < iterations + 10; i++) {
      const a = await timed(() => fresh(false));
      const w = await timed(() => fresh(true));
      const p = await timed(async () => {
        const r = await runner.runRaw(spec);
        if (Buffer.from(r.stdout).toString() !== expected)
          throw new Error('shout-wasm gave the wrong output');
      });
      const h = await timed(() => executeJob(i, job));
      if (i >= 10) {
        samples.abi.push(a);
        samples.wasi.push(w);
        samples.pool.push(p);
        samples.host.push(h);
      }
    }
  } finally {
    await runner.close();
  }
  const ABI = `peers: ${extism}, fresh plugin per call, its own ABI`;
  const WASI = `peers: ${extism}, fresh plugin per call, WASI on`;
  return [
    { name: ABI, isFloor: true, ...stats(samples.abi) },
    { name: WASI, isFloor: true, ...stats(samples.wasi) },
    {
      name: 'peers: capsule preview1 warm call, fresh instance (worker pool)',
      ...stats(samples.pool),
      peer: ABI,
    },
    {
      name: 'peers: capsule preview1 host in-process, fresh instance (no worker hop)',
      ...stats(samples.host),
      peer: ABI,
    },
  ];
}

async function shellRows(root, iterations) {
  let SandboxManager;
  try {
    ({ SandboxManager } = await import('@anthropic-ai/sandbox-runtime'));
  } catch (err) {
    process.stderr.write(`bench: peers: sandbox-runtime skipped (${err.message})\n`);
    return [];
  }
  const srt = `sandbox-runtime ${await versionOf('@anthropic-ai/sandbox-runtime')}`;
  try {
    await SandboxManager.initialize({
      network: { allowedDomains: [], deniedDomains: [] },
      filesystem: { denyRead: [], allowWrite: [], denyWrite: [] },
    });
  } catch (err) {
    process.stderr.write(`bench: peers: sandbox-runtime skipped (initialize: ${err.message})\n`);
    return [];
  }
  const { Registry } = await import('../dist/registry/registry.js');
  const { ShellRunner } = await import('../dist/runners/shell-runner.js');
  const { Executor } = await import('../dist/executor/executor.js');
  const { PermissionEngine } = await import('../dist/permissions/engine.js');
  const { createNonInteractivePrompter } = await import('../dist/permissions/prompter.js');
  const registry = new Registry({ roots: ['capabilities'], projectRoot: root });
  const executor = new Executor({
    registry,
    gate: await PermissionEngine.create({
      projectRoot: root,
      sessionGrants: ['run_capability:shout'],
      prompter: createNonInteractivePrompter(),
      audit: false,
    }),
    runners: [new ShellRunner({ projectRoot: root })],
  });
  const cap = await registry.get('shout');
  const input = '{"a":"b"}';
  const samples = { srt: [], ours: [] };
  try {
    for (let i = 0; i < iterations + 3; i++) {
      let t = performance.now();
      const wrapped = await SandboxManager.wrapWithSandbox(`sh ${cap.entryPath}`);
      const r = await execa('bash', ['-c', wrapped], { cwd: cap.dir, input, reject: false });
      const s = performance.now() - t;
      if (r.exitCode !== 0) throw new Error(`srt shout failed: ${r.stderr}`);
      t = performance.now();
      const { result } = await executor.run('shout', { a: 'b' });
      const o = performance.now() - t;
      if (result.exitCode !== 0) throw new Error(`capsule shout failed: ${result.stderr}`);
      if (i >= 3) {
        samples.srt.push(s);
        samples.ours.push(o);
      }
    }
  } finally {
    await SandboxManager.reset?.();
    await executor.close?.();
  }
  const SRT = `peers: ${srt}, wrapWithSandbox + spawn of the same script`;
  return [
    { name: SRT, isFloor: true, ...stats(samples.srt) },
    {
      name: 'peers: capsule shell library call (lookup, gate, validation, confined run)',
      ...stats(samples.ours),
      peer: SRT,
    },
  ];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rows = await benchPeers({ root, iterations: Number(process.env.ITER ?? 200) });
  for (const r of rows) {
    const peer = r.peer ? rows.find((f) => f.name === r.peer) : undefined;
    process.stdout.write(
      `${r.name.padEnd(84)} median ${r.median.toFixed(3)} ms${peer ? `  ${(r.median / peer.median).toFixed(2)}× peer` : ''}\n`,
    );
  }
  process.exit(0);
}
