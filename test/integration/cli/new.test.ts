import { existsSync, readdirSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { execa } from 'execa';
import { BUILT_CLI, builtCli } from '../../helpers/cli.js';
import { tempProject } from '../../helpers/capability.js';
import { eventually } from '../../helpers/eventually.js';
import { memoryIO } from '../../helpers/io.js';
import { runCli } from '../../../src/cli/program.js';

// `capsule new` judged by effect, through the built CLI: the folder exists and `capsule run` of it
// works; a failure leaves nothing in the capability root (not even the hidden staging folder).

async function project(): Promise<{ root: string; capRoot: string }> {
  const p = await tempProject('capsule-new-');
  await writeFile(path.join(p.root, 'capsule.json'), '{}\n');
  return p;
}

const entries = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir).sort() : []);

describe('capsule new', () => {
  it('progress lines go to a terminal only: none without one, none with --json', async () => {
    const { root } = await project();
    const on = memoryIO({ cwd: root, env: process.env });
    (on.io.stderr as { isTTY?: boolean }).isTTY = true;
    expect(await runCli(['new', 'seen', '--env', 'wasm'], on.io)).toBe(0);
    expect(on.stderr()).toMatch(/^capsule new: componentizing seen/m);
    const quiet = memoryIO({ cwd: root, env: process.env });
    (quiet.io.stderr as { isTTY?: boolean }).isTTY = true;
    expect(await runCli(['new', 'unseen', '--env', 'wasm', '--json'], quiet.io)).toBe(0);
    expect(quiet.stderr()).toBe('');
  });

  it('scaffolds a wasm capability from JavaScript (quiet without a terminal) that runs and passes its case', async () => {
    const { root, capRoot } = await project();
    const r = await builtCli(['new', 'echo-js', '--env', 'wasm', '--json'], { cwd: root });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({
      name: 'echo-js',
      environment: 'wasm',
      dir: 'capabilities/echo-js',
      sandboxed: true,
    });
    expect(r.stderr).not.toMatch(/capsule new:/);
    expect(entries(path.join(capRoot, 'echo-js'))).toEqual([
      'capability.json',
      'capability.wasm',
      'cases.json',
      'source.js',
    ]);
    const run = await builtCli(
      ['run', 'echo-js', '--grant', 'run_capability:echo-js', '--input', '{"n":1}'],
      {
        cwd: root,
      },
    );
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ received: { n: 1 } });
    const ci = await builtCli(['ci', '--grant', 'run_capability:echo-js'], { cwd: root });
    expect(ci.stdout).toContain('1 passed, 0 failed, 0 errors');
  });

  it('scaffolds shell and docker capabilities from a file (interpreter from its extension)', async () => {
    const { root, capRoot } = await project();
    await writeFile(path.join(root, 'count.py'), 'import sys\nprint(len(sys.stdin.read()))\n');
    const shell = await builtCli(['new', 'count', '--env', 'shell', '--from', 'count.py'], { cwd: root });
    expect(shell.code, shell.stderr).toBe(0);
    expect(shell.stdout).toMatch(/^created count \(shell\) in capabilities\/count$/m);
    const manifest = JSON.parse(await readFile(path.join(capRoot, 'count', 'capability.json'), 'utf8'));
    expect(manifest).toMatchObject({ environment: 'shell', interpreter: 'python3', entry: 'run.py' });
    // From a file, there is no scaffold case to write.
    expect(entries(path.join(capRoot, 'count'))).toEqual(['capability.json', 'run.py']);
    const run = await builtCli(['run', 'count', '--grant', 'run_capability:count', '--input', '{}'], {
      cwd: root,
    });
    expect(run.stdout.trim()).toBe('2');
    const docker = await builtCli(['new', 'boxed', '--env', 'docker', '--json'], { cwd: root });
    expect(docker.code, docker.stderr).toBe(0);
    expect(JSON.parse(await readFile(path.join(capRoot, 'boxed', 'capability.json'), 'utf8'))).toMatchObject({
      environment: 'docker',
      docker: { image: 'capsule/busybox:1' },
    });
  });

  it('refuses an existing name, a bad NAME, an unreadable --from and JS without run(), leaving nothing', async () => {
    const { root, capRoot } = await project();
    await mkdir(path.join(capRoot, 'taken'));
    await writeFile(path.join(capRoot, 'taken', 'mine.txt'), 'precious');
    const taken = await builtCli(['new', 'taken', '--env', 'shell'], { cwd: root });
    expect(taken.code).toBe(73);
    expect(taken.stderr).toMatch(/"taken" already exists.*nothing was written/);
    expect(entries(path.join(capRoot, 'taken'))).toEqual(['mine.txt']);

    const bad = await builtCli(['new', '../Escape', '--env', 'shell', '--json'], { cwd: root });
    expect(bad.code).toBe(64);
    expect(JSON.parse(bad.stdout)).toMatchObject({ error: { code: 'USAGE', field: 'NAME' } });

    const missing = await builtCli(['new', 'ghost', '--env', 'wasm', '--from', 'nope.js'], { cwd: root });
    expect(missing.code).toBe(66);
    expect(missing.stderr).toMatch(/--from nope\.js cannot be read \(ENOENT\)/);

    await writeFile(path.join(root, 'norun.js'), 'export function go() { return "x"; }\n');
    const norun = await builtCli(['new', 'norun', '--env', 'wasm', '--from', 'norun.js'], { cwd: root });
    expect(norun.code).toBe(65);
    expect(norun.stderr).toMatch(/norun\.js does not export a function named run/);
    expect(norun.stderr).not.toMatch(/^\s+at /m);

    await writeFile(path.join(root, 'broken.js'), 'export function run( {\n');
    const broken = await builtCli(['new', 'broken', '--env', 'wasm', '--from', 'broken.js'], { cwd: root });
    expect(broken.code).toBe(65);

    const envless = await builtCli(['new', 'nothing'], { cwd: root });
    expect(envless.code).toBe(64);
    expect(envless.stderr).toMatch(/--env/);

    const outside = await builtCli(['new', 'stray', '--env', 'shell', '--root', '..'], { cwd: root });
    expect(outside.code).toBe(65);
    expect(outside.stderr).toMatch(/--root|root: "\.\."/);
    expect(existsSync(path.join(path.dirname(root), 'stray'))).toBe(false);

    // Only the folder that was there before: no partial capability, no staging folder.
    expect(entries(capRoot)).toEqual(['taken']);
  });

  it('Ctrl-C while componentizing exits 130 and leaves nothing, not even the staging folder', async () => {
    const { root, capRoot } = await project();
    const child = execa('node', [BUILT_CLI, 'new', 'halted', '--env', 'wasm'], {
      cwd: root,
      reject: false,
      timeout: 60_000,
    });
    // Interrupt once the build has started (its staged manifest exists), not after a guessed delay.
    await eventually(
      () => entries(capRoot).some((n) => existsSync(path.join(capRoot, n, 'halted', 'capability.json'))),
      'the build started',
    );
    child.kill('SIGINT');
    const r = await child;
    expect(r.exitCode).toBe(130);
    expect(r.stderr).toContain('canceled; nothing was written');
    expect(entries(capRoot)).toEqual([]);
  });
});
