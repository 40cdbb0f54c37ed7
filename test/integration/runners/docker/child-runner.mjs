// Child process for cleanup.test.ts: runs one long call through the BUILT runner (dist/), so the test can
// kill this process mid-call. argv: <capability dir> <handleProcessSignals: yes|no>
import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');
const { DockerRunner } = await import(path.join(root, 'dist/runners/docker/runner.js'));
const { parseManifest } = await import(path.join(root, 'dist/manifest/parse.js'));
// The permit the executor would hand the runner (test/helpers/permit.ts, from the built module).
const { mintRunnerPermit } = await import(path.join(root, 'dist/runners/permit.js'));
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
const runner = new DockerRunner({ env: process.env, handleProcessSignals: process.argv[3] === 'yes' });
process.stdout.write('running\n');
const result = await runner.run({ capability, input: '{}' }, mintRunnerPermit(capability));
process.stdout.write(`finished ${JSON.stringify(result)}\n`);
await runner.close();
