#!/usr/bin/env node
// The README's test command: provision what the tests need (a Docker engine, the offline
// sandbox images and headless Chromium), build capsule (integration tests drive the built CLI), then run both test projects.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
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
// bubblewrap, which confines shell capabilities and host commands (the confinement tests hold it).
step('provision the host confinement', 'bash', ['scripts/provision-host.sh']);
// Headless Chromium, for the tests that render the HTML reports in a real browser.
step('provision the browser', 'bash', ['scripts/provision-browser.sh']);
step('build', 'npm', ['run', 'build', '--silent']);
step('build the sandbox images', 'node', ['scripts/build-images.mjs']);
// The scale-out tests' own engines (pool, weaker posture, two-node swarm), each in a network namespace of its
// own; the main engine is only read from (its images are copied in).
step('start the extra engines', 'bash', ['scripts/extra-engines.sh', 'up']);
step('typecheck', 'npm', ['run', 'typecheck', '--silent']);
step('lint', 'npm', ['run', 'lint', '--silent']);
const scratch = mkdtempSync(path.join(tmpdir(), 'capsule-test-'));
const report = path.join(scratch, 'vitest.json');
const tests = spawnSync(
  'npx',
  [
    'vitest',
    'run',
    '--reporter=default',
    '--reporter=json',
    `--outputFile.json=${report}`,
    ...process.argv.slice(2),
  ],
  // capsule's per-user state (confirmed policies, audit heads) goes to a folder of this run, so a test
  // run neither reads nor leaves anything in the home directory of the machine.
  { cwd: root, stdio: 'inherit', env: { ...process.env, XDG_STATE_HOME: path.join(scratch, 'state') } },
);
// One plain closing line, whatever the reporter printed above it.
try {
  const r = JSON.parse(readFileSync(report, 'utf8'));
  const skipped = r.numPendingTests + r.numTodoTests;
  process.stdout.write(
    `\n${r.numPassedTests} passed, ${r.numFailedTests} failed${skipped ? `, ${skipped} skipped` : ''}\n`,
  );
} catch {
  process.stdout.write('\nthe test run wrote no report\n');
}
process.exit(tests.status ?? 1);
