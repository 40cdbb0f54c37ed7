// Child process for deadlines.test.ts: prestarts one parked container through the BUILT runner (dist/) and then
// idles, so the test can stop this process while the container waits. argv: <capability dir> <parked idle ms>
import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');
const { DockerRunner } = await import(path.join(root, 'dist/runners/docker/runner.js'));
const { parseManifest } = await import(path.join(root, 'dist/manifest/parse.js'));
const dir = await realpath(process.argv[2]);
const parsed = parseManifest(await readFile(path.join(dir, 'capability.json'), 'utf8'));
if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
const capability = {
  name: parsed.manifest.name,
  environment: 'docker',
  manifest: parsed.manifest,
  dir,
  manifestPath: path.join(dir, 'capability.json'),
  entryPath: path.join(dir, parsed.manifest.entry),
  contentHash: 'sha256:child',
  root: path.dirname(dir),
  fsGrants: [],
};
const runner = new DockerRunner({ env: process.env, parkedIdleMs: Number(process.argv[3]) });
await runner.prewarm(capability);
process.stdout.write('parked\n');
setInterval(() => {}, 1 << 30);
