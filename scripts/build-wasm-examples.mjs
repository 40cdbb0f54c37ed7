#!/usr/bin/env node
// Rebuilds the shipped Wasm example capabilities from their sources:
//   capabilities/hello/hello.js        -> hello.wasm  (component, componentize-qjs, QuickJS, sync ABI)
//   capabilities/digest-notes/digest.js -> digest.wasm (the same, with files through wasi:filesystem)
//   capabilities/fetch-wasm/fetch.js   -> fetch.wasm  (the same, with HTTP through capsule:capability/http)
//   capabilities/shout-wasm/shout.wat  -> shout.wasm  (WASI preview1 module, wabt's WAT assembler)
// Components are built as capsule builds them (with its web globals: TextEncoder, URL, …).
// Usage: node scripts/build-wasm-examples.mjs [NAME…]   (after npm install and npm run build; NAME: only
// those capability folders)
import { readFile, rename, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const at = (...p) => path.join(root, ...p);

async function writeAtomic(file, bytes) {
  const tmp = `${file}.tmp-${process.pid}`;
  await writeFile(tmp, bytes);
  await rename(tmp, file);
}

const only = process.argv.slice(2);
const wanted = (file) => only.length === 0 || only.includes(file.split('/')[1]);
const { componentizeJs } = await import(at('dist/runners/wasm/componentize.js'));
for (const [js, wasm] of [
  ['capabilities/hello/hello.js', 'capabilities/hello/hello.wasm'],
  ['capabilities/digest-notes/digest.js', 'capabilities/digest-notes/digest.wasm'],
  ['capabilities/fetch-wasm/fetch.js', 'capabilities/fetch-wasm/fetch.wasm'],
].filter(([js]) => wanted(js))) {
  const started = Date.now();
  // runtimes/wasm: the JS authoring world (capability.wit) and the WASI interfaces it offers (deps/).
  const { component } = await componentizeJs(await readFile(at(js), 'utf8'), {
    witPath: at('runtimes/wasm'),
    file: js,
  });
  await writeAtomic(at(wasm), component);
  console.log(`${wasm}: ${component.length} bytes (${Date.now() - started} ms)`);
}

if (!wanted('capabilities/shout-wasm/')) process.exit(0);
const wabt = await (await import('wabt')).default();
const wat = await readFile(at('capabilities/shout-wasm/shout.wat'), 'utf8');
const { buffer } = wabt.parseWat('shout.wat', wat).toBinary({});
await writeAtomic(at('capabilities/shout-wasm/shout.wasm'), buffer);
console.log(`capabilities/shout-wasm/shout.wasm: ${buffer.length} bytes`);
