// Whole-process start-up: the built CLI as a user or a CI job runs it (a new node process per call)
// against `node -e 0`, the floor no Node CLI can beat, spawned alternately in the same run so noise hits both.
// Usage: import { benchProcess } from './process.mjs' (bench/run.mjs), or `node bench/process.mjs` after `npm run build`.
import { spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { stats } from './stats.mjs';

const FLOOR = 'process: node -e 0';

export async function benchProcess({ root, iterations = 15 }) {
  const main = path.join(root, 'dist', 'cli', 'main.js');
  // A temp project holding the shipped hello component, and its own cache and state folders: the
  // warm-up run fills the component cache the measured runs then hit, and the audit log and confirmed
  // policy land there rather than in the repository's or the user's.
  const home = await mkdtemp(path.join(os.tmpdir(), 'capsule-bench-process-'));
  const project = path.join(home, 'project');
  await cp(path.join(root, 'capabilities', 'hello'), path.join(project, 'capabilities', 'hello'), {
    recursive: true,
  });
  await writeFile(path.join(project, 'capsule.json'), '{}\n');
  // The Claude Code hook reads the project's Claude settings on every call, as it would in a real session.
  await mkdir(path.join(project, '.claude'), { recursive: true });
  await writeFile(
    path.join(project, '.claude', 'settings.json'),
    JSON.stringify({ permissions: { allow: ['Bash(git status:*)'], deny: ['Bash(rm:*)'] } }),
  );
  const envelope = (tool, input) =>
    JSON.stringify({ hook_event_name: 'PreToolUse', tool_name: tool, tool_input: input, cwd: project });
  const env = {
    ...process.env,
    XDG_CACHE_HOME: path.join(home, 'cache'),
    XDG_STATE_HOME: path.join(home, 'state'),
    HOME: path.join(home, 'home'),
    CLAUDE_PROJECT_DIR: project,
  };
  const cases = [
    [FLOOR, ['-e', '0']],
    ['process: capsule --version', [main, '--version']],
    ['process: capsule list', [main, 'list']],
    ["process: capsule key -- 'git status'", [main, 'key', '--', 'git status']],
    [
      "process: capsule hook claude (Bash 'git status' envelope)",
      [main, 'hook', 'claude'],
      envelope('Bash', { command: 'git status' }),
    ],
    [
      'process: capsule hook claude (Write envelope)',
      [main, 'hook', 'claude'],
      envelope('Write', { file_path: path.join(project, 'a.txt'), content: 'x' }),
    ],
    [
      'process: capsule run hello (component in the disk cache)',
      [main, 'run', 'hello', '--grant', 'run_capability:hello', '--input', '{"name":"bench"}'],
    ],
  ];
  const spawn = (args, input) => {
    const t = performance.now();
    const r = spawnSync(process.execPath, args, { cwd: project, env, input, encoding: 'utf8' });
    const ms = performance.now() - t;
    if (r.status !== 0) throw new Error(`node ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
    return ms;
  };
  try {
    // Warm-up: the OS file cache, and the component's transpiled glue written to the disk cache.
    for (const [, args, input] of cases) spawn(args, input);
    // Round-robin, so a burst of load on the machine hits every row alike.
    const samples = new Map(cases.map(([name]) => [name, []]));
    for (let i = 0; i < iterations; i++) {
      for (const [name, args, input] of cases) samples.get(name).push(spawn(args, input));
    }
    return cases.map(([name]) =>
      name === FLOOR
        ? { name, isFloor: true, ...stats(samples.get(name)) }
        : { name, floor: FLOOR, ...stats(samples.get(name)) },
    );
  } finally {
    await rm(home, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rows = await benchProcess({ root, iterations: Number(process.env.ITER ?? 15) });
  const floor = rows.find((r) => r.isFloor).median;
  for (const r of rows) {
    process.stdout.write(
      `${r.name.padEnd(60)} ${r.median.toFixed(1).padStart(8)} ms  ${(r.median / floor).toFixed(2)}×\n`,
    );
  }
}
