// Part of `npm run build` (after tsc): bundles the CLI that `capsule` (dist/cli/main.js) runs into
// a few CommonJS files in dist/cli/, replacing tsc's dist/cli/. On Node 20 a process that loads ~280
// small ES modules one by one spends most of its start-up in the module loader; the same code as
// CommonJS chunks starts in a fraction of that (docs/benchmarks.md). The library (dist/index.js and
// everything under dist/ but cli/) stays tsc's ES modules.
//
// - Lazily imported parts stay lazy: every dynamic import() is its own chunk, loaded on first use.
// - npm packages bundled into the CLI get a chunk each, dist/cli/vendor/<package>.js, so what a
//   command loads can still be told by package (test/integration/cli/startup-modules.test.ts).
// - External (required or imported from node_modules at run time): packages that load files of
//   their own (Wasm, grammars, native addons), the OpenTelemetry API (one global a preloaded SDK
//   registers with), and the TypeScript compiler (only used when running from src/).
// - The Wasm worker is bundled on its own into dist/cli/worker.js, beside the runner that starts it.
import { cp, mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { rolldown } from 'rolldown';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dist = path.join(root, 'dist');
const cliDir = path.join(dist, 'cli');
const staging = path.join(dist, '.cli-bundle');

const EXTERNAL = [
  /^@bytecodealliance\//,
  /^componentize-qjs($|\/)/,
  /^web-tree-sitter($|\/)/,
  /^tree-sitter-bash($|\/)/,
  /^dockerode($|\/)/,
  /^@opentelemetry\//,
  /^typescript($|\/)/,
];

/** The npm package a module id lies in (after the last node_modules/), or undefined. */
function packageOf(id) {
  const m = /[\\/]node_modules[\\/]((?:@[^\\/]+[\\/])?[^\\/]+)[\\/](?!.*[\\/]node_modules[\\/])/.exec(id);
  return m?.[1]?.replace(/\\/g, '/');
}

/** Every package in node_modules/ (scoped ones as `@scope/name`). */
async function installedPackages() {
  const top = await readdir(path.join(root, 'node_modules'));
  const names = [];
  for (const name of top) {
    if (name.startsWith('.')) continue;
    if (!name.startsWith('@')) names.push(name);
    else for (const sub of await readdir(path.join(root, 'node_modules', name))) names.push(`${name}/${sub}`);
  }
  return names;
}

function vendorGroup(name) {
  return { name: `vendor/${name}`, test: (id) => packageOf(id) === name };
}

await rm(staging, { recursive: true, force: true });
const external = (id) => EXTERNAL.some((re) => re.test(id));

const cli = await rolldown({
  input: { main: path.join(cliDir, 'main.js') },
  platform: 'node',
  external,
  logLevel: 'warn',
});
await cli.write({
  dir: staging,
  format: 'cjs',
  // import() of a package becomes require() (Node 20.19+ requires ES modules too): a module compiled
  // from a V8 code cache (src/cli/code-cache.ts) cannot import().
  dynamicImportInCjs: false,
  entryFileNames: '[name].js',
  chunkFileNames: '[name].js',
  // One group per package (a group whose name is computed per module may be merged with another).
  codeSplitting: {
    includeDependenciesRecursively: false,
    groups: (await installedPackages()).map(vendorGroup),
  },
});
await cli.close();

// The worker, one file: it imports each component's transpiled glue (a data: URL) with import().
const worker = await rolldown({
  input: path.join(dist, 'runners', 'wasm', 'worker.js'),
  platform: 'node',
  external,
  logLevel: 'warn',
});
await worker.write({ file: path.join(staging, 'worker.js'), format: 'cjs', codeSplitting: false });
await worker.close();

// The precompiled input meta-schema validator is required beside the code that checks inputs.
await cp(path.join(dist, 'manifest', 'input-meta.cjs'), path.join(staging, 'input-meta.cjs'));
// dist/ is an ES module package ("type": "module"); the bundle is CommonJS.
await writeFile(path.join(staging, 'package.json'), '{ "type": "commonjs" }\n');

await rm(cliDir, { recursive: true, force: true });
await mkdir(path.dirname(cliDir), { recursive: true });
await cp(staging, cliDir, { recursive: true });
await rm(staging, { recursive: true, force: true });
const files = (await readdir(cliDir, { recursive: true })).filter((f) => f.endsWith('.js'));
process.stdout.write(`bundled the CLI into ${files.length} files in dist/cli/\n`);
