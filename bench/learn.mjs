// What a learning run costs over a plain run of the same capability in the same runner, interleaved call by
// call so noise hits both: shell (the tracer, strace, inside the same confinement) for an sh script and a
// node script that reads a granted file, and Wasm (capsule's filesystem host recording every call) for a
// component that reads and writes through a granted folder. Docker has no row: a learning docker run is the
// same container run, with the egress proxy's records (made on every run anyway) kept.
// Usage: import { benchLearn } from './learn.mjs' (bench/run.mjs), or `node bench/learn.mjs` after `npm run build`.
import { mintRunnerPermit } from '../dist/runners/permit.js';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { stats } from './stats.mjs';

const NODE_READER = `import fs from 'node:fs';
const text = fs.readFileSync(process.env.CAPSULE_PROJECT_DIR + '/data/in.txt', 'utf8');
console.log(text.length);
`;

const COMPONENT = `
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';
export function run(input) {
  const [[dir]] = getDirectories();
  const [bytes] = dir.openAt({}, 'in.txt', {}, { read: true }).read(65536, 0);
  const out = dir.openAt({}, 'out.txt', { create: true, truncate: true }, { write: true });
  out.writeViaStream(0).blockingWriteAndFlush(bytes);
  return String(bytes.length);
}
`;

export async function benchLearn({ root, dist = path.join(root, 'dist'), iterations = 30 }) {
  return [
    ...(await shellRows({ dist, iterations })),
    ...(await wasmRows({ dist, iterations: iterations * 5 })),
  ];
}

async function shellRows({ dist, iterations }) {
  const { ShellRunner } = await import(path.join(dist, 'runners/shell-runner.js'));
  const { Registry } = await import(path.join(dist, 'registry/registry.js'));
  const project = await mkdtemp(path.join(os.tmpdir(), 'capsule-bench-learn-'));
  const capRoot = path.join(project, 'capabilities');
  await mkdir(path.join(project, 'data'), { recursive: true });
  await writeFile(path.join(project, 'data', 'in.txt'), 'some text\n'.repeat(100));
  const caps = {};
  for (const [name, interpreter, entry, text] of [
    ['sh-reader', 'sh', 'run.sh', 'cat "$CAPSULE_PROJECT_DIR/data/in.txt" | wc -c\n'],
    ['node-reader', 'node', 'run.mjs', NODE_READER],
  ]) {
    const dir = path.join(capRoot, name);
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, entry), text);
    await writeFile(
      path.join(dir, 'capability.json'),
      JSON.stringify({
        schemaVersion: 1,
        name,
        description: 'reads a file',
        environment: 'shell',
        entry,
        interpreter,
        grants: { fs: [{ path: 'data' }] },
      }),
    );
    caps[name] = undefined;
  }
  const registry = new Registry({ roots: ['capabilities'], projectRoot: project });
  for (const name of Object.keys(caps)) caps[name] = await registry.get(name);
  const runner = new ShellRunner({ projectRoot: project });
  const samples = Object.fromEntries(
    Object.keys(caps).flatMap((n) => [
      [`${n} plain`, []],
      [`${n} learn`, []],
    ]),
  );
  try {
    for (let i = 0; i < iterations + 3; i++) {
      for (const [name, capability] of Object.entries(caps)) {
        for (const learn of [false, true]) {
          const t = performance.now();
          const r = await runner.run({ capability, input: '{}', learn }, mintRunnerPermit(capability));
          const ms = performance.now() - t;
          if (r.exitCode !== 0) throw new Error(`${name} failed: ${r.stderr}`);
          if (learn && !r.observed?.observations.some((o) => o.path?.endsWith('in.txt')))
            throw new Error(`${name}: the tracer did not see the file read`);
          if (i >= 3) samples[`${name} ${learn ? 'learn' : 'plain'}`].push(ms);
        }
      }
    }
  } finally {
    await runner.close();
    await rm(project, { recursive: true, force: true });
  }
  return Object.keys(caps).flatMap((name) => {
    const floor = `learn: shell ${name}, plain run (same confinement)`;
    return [
      { name: floor, isFloor: true, ...stats(samples[`${name} plain`]) },
      { name: `learn: shell ${name}, learning run (strace -f)`, ...stats(samples[`${name} learn`]), floor },
    ];
  });
}

async function wasmRows({ dist, iterations }) {
  const { WasmRunner } = await import(path.join(dist, 'runners/wasm/wasm-runner.js'));
  const { componentizeJs } = await import(path.join(dist, 'runners/wasm/componentize.js'));
  const { component } = await componentizeJs(COMPONENT, { file: 'bench-learn.js' });
  const dir = await mkdtemp(path.join(os.tmpdir(), 'capsule-bench-learn-wasm-'));
  await writeFile(path.join(dir, 'in.txt'), 'granted text\n'.repeat(300));
  const spec = (record) => ({
    file: 'bench-learn.wasm',
    bytes: component,
    programName: 'bench',
    args: [],
    env: {},
    input: Buffer.from('{}'),
    dirs: [{ hostPath: dir, guestPath: '/data', mode: 'rw' }],
    timeoutMs: 10_000,
    memoryMb: 64,
    outputBytes: 1 << 20,
    record,
  });
  const runner = new WasmRunner({ poolSize: 2 });
  await runner.warm();
  const plain = [];
  const learn = [];
  try {
    for (let i = 0; i < iterations + 10; i++) {
      let t = performance.now();
      await runner.runRaw(spec(false));
      const p = performance.now() - t;
      t = performance.now();
      const r = await runner.runRaw(spec(true));
      const l = performance.now() - t;
      if (!(r.files ?? []).some((f) => f.path.endsWith('in.txt')))
        throw new Error('the wasm host did not record the file read');
      if (i >= 10) {
        plain.push(p);
        learn.push(l);
      }
    }
  } finally {
    await runner.close();
    await rm(dir, { recursive: true, force: true });
  }
  const floor = 'learn: wasm component with files, plain warm call';
  return [
    { name: floor, isFloor: true, ...stats(plain) },
    { name: 'learn: wasm component with files, learning call (host records)', ...stats(learn), floor },
  ];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  for (const r of await benchLearn({ root })) console.log(JSON.stringify(r));
}
