// Host/container adapter for a portable JavaScript capability: a module exporting
// `run(input: string): string`. It gives the module capsule's process I/O contract — input on stdin,
// the return value on stdout, exit 0; a throw becomes its message on stderr and exit 1 — the same
// contract the Wasm component built from that module has.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modulePath = process.argv[2];
if (!modulePath) {
  process.stderr.write('run-module: usage: run-module.mjs MODULE.js\n');
  process.exit(2);
}
let input = '';
process.stdin.setEncoding('utf8');
for await (const chunk of process.stdin) input += chunk;
try {
  const mod = await import(pathToFileURL(path.resolve(modulePath)).href);
  if (typeof mod.run !== 'function') throw new Error(`${modulePath} does not export a run(input) function`);
  const output = await mod.run(input);
  process.stdout.write(typeof output === 'string' ? output : JSON.stringify(output));
} catch (err) {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
}
