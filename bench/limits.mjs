// Limits and round trips whose speed tests do not judge (tests judge the effect: killed, cut, gone):
// how long past limits.timeoutMs a run ends, how long a flood takes to cut and what it costs in memory,
// and the MCP round trip of run_capability against the library call (the same capability, same process).
import { mintRunnerPermit } from '../dist/runners/permit.js';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stats } from './stats.mjs';

async function tempCapability(name, script, limits) {
  const root = await mkdtemp(path.join(tmpdir(), 'capsule-bench-limits-'));
  const dir = path.join(root, 'capabilities', name);
  await mkdir(dir, { recursive: true });
  const manifest = {
    schemaVersion: 1,
    name,
    description: name,
    environment: 'shell',
    entry: 'run.sh',
    interpreter: 'sh',
    limits,
  };
  await writeFile(path.join(dir, 'capability.json'), JSON.stringify(manifest));
  await writeFile(path.join(dir, 'run.sh'), script);
  return { root, dir };
}

async function loaded(root, dir) {
  const { Registry } = await import('../dist/registry/registry.js');
  return new Registry({ roots: ['capabilities'], projectRoot: root }).get(path.basename(dir));
}

async function sample(n, fn) {
  const xs = [];
  for (let i = 0; i < n; i++) xs.push(await fn());
  return stats(xs);
}

export async function benchLimits({ root, iterations = 10 }) {
  const rows = [];
  const { ShellRunner } = await import('../dist/runners/shell-runner.js');
  const shell = new ShellRunner();

  const stubborn = await tempCapability('stubborn', "trap '' TERM\n(trap '' TERM; sleep 30) &\nsleep 30\n", {
    timeoutMs: 300,
  });
  const stubbornCap = await loaded(stubborn.root, stubborn.dir);
  rows.push({
    name: 'limits: shell run past a 300 ms timeout (SIGTERM ignored), ms after the limit',
    ...(await sample(
      iterations,
      async () =>
        (await shell.run({ capability: stubbornCap, input: '{}' }, mintRunnerPermit(stubbornCap)))
          .durationMs - 300,
    )),
  });

  const flood = await tempCapability('flood', 'head -c 1000000000 /dev/zero | tr "\\0" x\n', {
    outputBytes: 65536,
    timeoutMs: 20_000,
  });
  const floodCap = await loaded(flood.root, flood.dir);
  let rssGrowth = 0;
  rows.push({
    name: 'limits: shell 1 GB flood cut at 64 KiB',
    ...(await sample(iterations, async () => {
      const before = process.memoryUsage().rss;
      const r = await shell.run({ capability: floodCap, input: '{}' }, mintRunnerPermit(floodCap));
      rssGrowth = Math.max(rssGrowth, process.memoryUsage().rss - before);
      return r.durationMs;
    })),
  });
  rows.push({
    name: 'limits: shell 1 GB flood, largest RSS growth (MiB, not ms)',
    median: rssGrowth / 2 ** 20,
    p95: rssGrowth / 2 ** 20,
  });

  const { WasmRunner } = await import('../dist/runners/wasm/wasm-runner.js');
  const wabt = await (await import('wabt')).default();
  const { readFileSync } = await import('node:fs');
  const probe = wabt
    .parseWat('probe.wat', readFileSync(path.join(root, 'fixtures/wasm/probe.wat'), 'utf8'))
    .toBinary({}).buffer;
  const wasm = new WasmRunner({ poolSize: 1 });
  const spec = {
    file: 'probe.wasm',
    bytes: probe,
    programName: 'probe',
    env: {},
    input: new Uint8Array(0),
    dirs: [],
    memoryMb: 16,
    outputBytes: 1 << 20,
  };
  rows.push({
    name: 'limits: wasm spin past a 300 ms timeout, ms after the limit',
    ...(await sample(
      iterations,
      async () => (await wasm.runRaw({ ...spec, args: ['ispin'], timeoutMs: 300 })).durationMs - 300,
    )),
  });
  await wasm.close();

  // The MCP round trip against the library call (moved here from a test that could not fail).
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
  const { openAgentSession } = await import('../dist/agent/open-session.js');
  const hello = await tempCapability('hello', 'echo hello\n', {});
  const client = new Client({ name: 'capsule-bench', version: '0' });
  await client.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [path.join(root, 'dist/cli/main.js'), 'mcp', '--grant', 'run_capability:hello'],
      cwd: hello.root,
      stderr: 'ignore',
    }),
  );
  const lib = await openAgentSession({
    cwd: hello.root,
    grants: ['run_capability:hello'],
    runners: [new ShellRunner()],
  });
  const call = { name: 'run_capability', arguments: { name: 'hello' } };
  await client.callTool(call);
  await lib.call('run_capability', { name: 'hello' });
  const time = async (fn) => {
    const t = performance.now();
    await fn();
    return performance.now() - t;
  };
  const mcp = [];
  const direct = [];
  for (let i = 0; i < iterations * 2; i++) {
    mcp.push(await time(() => client.callTool(call)));
    direct.push(await time(() => lib.call('run_capability', { name: 'hello' })));
  }
  rows.push({ name: 'mcp: run_capability, library call (floor)', isFloor: true, ...stats(direct) });
  rows.push({
    name: 'mcp: run_capability over MCP stdio',
    floor: 'mcp: run_capability, library call (floor)',
    ...stats(mcp),
  });
  await lib.close();
  await client.close();
  return rows;
}
