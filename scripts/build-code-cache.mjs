// Part of `npm run build` (after scripts/bundle-cli.mjs): runs the bundled CLI as a user would, with
// CAPSULE_WRITE_CODE_CACHE=1, so each chunk a command loads gets its V8 code cache written beside it
// (dist/cli/<chunk>.js.cache, see src/cli/code-cache.ts). The runs are `list`, `run hello` (the shipped
// component), `key` and `hook claude` on two envelopes: a chunk two runs load keeps the later, larger cache.
// `key` and `hook` run under other V8 flags (--liftoff-only, see src/cli/main.ts), so their chunks get
// caches of their own (<chunk>.js.liftoff.cache), which never replace the others (V8 would reject them).
// A run that fails only leaves those chunks without a cache (they compile from source, as without one);
// the build goes on.
import { spawnSync } from 'node:child_process';
import { cp, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const cliDir = path.join(root, 'dist', 'cli');
const main = path.join(cliDir, 'main.js');

for (const f of await readdir(cliDir, { recursive: true }))
  if (f.endsWith('.cache')) await rm(path.join(cliDir, f), { force: true });

// A project of its own, with its own cache and state folders: nothing of the user's is read or written.
const home = await mkdtemp(path.join(os.tmpdir(), 'capsule-code-cache-'));
try {
  const project = path.join(home, 'project');
  await cp(path.join(root, 'capabilities', 'hello'), path.join(project, 'capabilities', 'hello'), {
    recursive: true,
  });
  await writeFile(path.join(project, 'capsule.json'), '{}\n');
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: home,
    XDG_CACHE_HOME: path.join(home, 'cache'),
    XDG_STATE_HOME: path.join(home, 'state'),
    XDG_CONFIG_HOME: path.join(home, 'config'),
    CAPSULE_WRITE_CODE_CACHE: '1',
  };
  // The Claude Code hook runs once per tool call: its chunks (the bash parser's among them) get caches too.
  const envelope = (tool, input) =>
    JSON.stringify({ hook_event_name: 'PreToolUse', tool_name: tool, tool_input: input, cwd: project });
  const runs = [
    [['list']],
    [['run', 'hello', '--grant', 'run_capability:hello', '--no-prompt', '--input', '{"name":"build"}']],
    // `key` runs under the hook's flags but through the program (commander); the hook runs after it, so a
    // chunk both load keeps the hook's cache (it runs on every tool call).
    [['key', '--', 'git status']],
    [['hook', 'claude'], envelope('Write', { file_path: path.join(project, 'a.txt'), content: '' })],
    [['hook', 'claude'], envelope('Bash', { command: 'git status' })],
  ];
  for (const [args, input] of runs) {
    const r = spawnSync(process.execPath, [main, ...args], {
      cwd: project,
      env,
      input,
      encoding: 'utf8',
      timeout: 120_000,
    });
    if (r.status !== 0) {
      process.stderr.write(
        `warning: \`capsule ${args[0]}\` for the code cache exited ${r.status ?? r.signal}; its chunks get no cache\n${r.stderr}`,
      );
    }
  }
} finally {
  await rm(home, { recursive: true, force: true });
}
const caches = (await readdir(cliDir, { recursive: true })).filter((f) => f.endsWith('.cache'));
process.stdout.write(`wrote ${caches.length} code caches in dist/cli/\n`);
