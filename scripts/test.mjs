#!/usr/bin/env node
// The README's test command: provision what the tests need (a Docker engine and the offline
// sandbox images), build capsule (integration tests drive the built CLI), then run both test projects.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function step(title, command, args) {
  process.stderr.write(`\n== ${title}\n`);
  const started = Date.now();
  const r = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) {
    process.stderr.write(`== ${title} failed (exit ${r.status ?? r.signal})\n`);
    process.exit(r.status ?? 1);
  }
  process.stderr.write(`== ${title}: ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}

step('provision the Docker engine', 'bash', ['scripts/provision-docker.sh']);
step('build', 'npm', ['run', 'build', '--silent']);
if (existsSync(path.join(root, 'scripts', 'build-images.mjs'))) {
  step('build the sandbox images', 'node', ['scripts/build-images.mjs']);
}
step('typecheck', 'npm', ['run', 'typecheck', '--silent']);
step('lint', 'npm', ['run', 'lint', '--silent']);
step('tests', 'npx', ['vitest', 'run', ...process.argv.slice(2)]);
