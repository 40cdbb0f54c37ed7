#!/usr/bin/env node
// The README's test command: provision what the tests need (a Docker engine and the offline
// sandbox images), build capsule (integration tests drive the built CLI), then run both test projects.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function step(title, command, args, env = process.env) {
  process.stderr.write(`\n== ${title}\n`);
  const started = Date.now();
  const r = spawnSync(command, args, { cwd: root, stdio: 'inherit', env });
  if (r.status !== 0) {
    process.stderr.write(`== ${title} failed (exit ${r.status ?? r.signal})\n`);
    process.exit(r.status ?? 1);
  }
  process.stderr.write(`== ${title}: ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}

// gVisor too, so the runsc tests run everywhere the suite runs (no test is skipped).
step('provision the Docker engine', 'bash', ['scripts/provision-docker.sh'], {
  ...process.env,
  CAPSULE_GVISOR: '1',
});
step('build', 'npm', ['run', 'build', '--silent']);
step('build the sandbox images', 'node', ['scripts/build-images.mjs']);
step('typecheck', 'npm', ['run', 'typecheck', '--silent']);
step('lint', 'npm', ['run', 'lint', '--silent']);
step('tests', 'npx', ['vitest', 'run', ...process.argv.slice(2)]);
