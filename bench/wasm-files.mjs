// Wasm components with files: the same component called with a granted folder (it reads a granted
// file and writes one, through capsule's confined wasi:filesystem) and without one (it returns at
// once), interleaved call by call in the same worker pool.
// Usage: import { benchWasmFiles } from './wasm-files.mjs' (bench/run.mjs), or `node bench/wasm-files.mjs` after `npm run build`.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { stats } from './stats.mjs';

const SOURCE = `
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';
export function run(input) {
  if (input !== 'files') return 'none';
  const [[dir]] = getDirectories();
  const [bytes] = dir.openAt({}, 'in.txt', {}, { read: true }).read(65536, 0);
  const out = dir.openAt({}, 'out.txt', { create: true, truncate: true }, { write: true });
  out.writeViaStream(0).blockingWriteAndFlush(bytes);
  return String(bytes.length);
}
`;

export async function benchWasmFiles({ root, dist = path.join(root, 'dist'), iterations = 200 }) {
  const { WasmRunner } = await import(path.join(dist, 'runners/wasm/wasm-runner.js'));
  const { componentizeJs } = await import(path.join(dist, 'runners/wasm/componentize.js'));
  const { component } = await componentizeJs(SOURCE, { file: 'bench-files.js' });
  const dir = await mkdtemp(path.join(os.tmpdir(), 'capsule-bench-files-'));
  const text = 'granted text\n'.repeat(300); // ~4 KB
  await writeFile(path.join(dir, 'in.txt'), text);
  const spec = (input, dirs) => ({
    file: 'bench-files.wasm',
    bytes: component,
    programName: 'bench',
    args: [],
    env: {},
    input: Buffer.from(input),
    dirs,
    timeoutMs: 10_000,
    memoryMb: 64,
    outputBytes: 1 << 20,
  });
  const runner = new WasmRunner({ poolSize: 2 });
  await runner.warm();
  const grant = [{ hostPath: dir, guestPath: '/data', mode: 'rw' }];
  const samples = { none: [], files: [] };
  try {
    for (let i = 0; i < iterations + 10; i++) {
      let t = performance.now();
      const a = await runner.runRaw(spec('none', []));
      const n = performance.now() - t;
      t = performance.now();
      const b = await runner.runRaw(spec('files', grant));
      const f = performance.now() - t;
      if (
        Buffer.from(a.stdout).toString() !== 'none' ||
        Buffer.from(b.stdout).toString() !== String(text.length)
      )
        throw new Error(
          `the files component gave the wrong output: ${Buffer.from(b.stdout)}${Buffer.from(b.stderr)}`,
        );
      if (i >= 10) {
        samples.none.push(n);
        samples.files.push(f);
      }
    }
    if ((await readFile(path.join(dir, 'out.txt'), 'utf8')) !== text)
      throw new Error('out.txt was not written');
  } finally {
    await runner.close();
    await rm(dir, { recursive: true, force: true });
  }
  const floor = 'wasm: component warm call, no files (same component, no grant)';
  return [
    { name: floor, isFloor: true, ...stats(samples.none) },
    {
      name: 'wasm: component warm call with files (rw grant: read a 4 KB file, write it back)',
      ...stats(samples.files),
      floor,
    },
  ];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rows = await benchWasmFiles({ root, dist: process.env.CAPSULE_DIST ?? path.join(root, 'dist') });
  const floor = rows[0];
  for (const r of rows)
    console.log(
      `${r.name.padEnd(84)} median ${r.median.toFixed(3)} ms  p95 ${r.p95.toFixed(3)} ms  ${(r.median / floor.median).toFixed(2)}× floor`,
    );
}
