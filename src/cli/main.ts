#!/usr/bin/env node
import { createRequire } from 'node:module';
import { isatty } from 'node:tty';
import { setFlagsFromString } from 'node:v8';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { VERSION } from './version.js';

const argv = process.argv.slice(2);
// `capsule --version` alone answers before the program (commander and every command's registration) loads:
// it is what scripts and CI jobs call to probe for capsule. Anything else goes through the program.
if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
  process.stdout.write(`${VERSION}\n`);
  process.exit(0);
}
/**
 * Node's builtin modules that commands load, required before the V8 flags change: Node compiles a builtin
 * from its own embedded code cache only under the flags that cache was made with, and from source after
 * any setFlagsFromString (3–5 times slower). Loaded here, they cost what they cost in a plain `node`.
 * Those almost every command loads, and those a command that runs capabilities adds (the Wasm worker
 * pool, the egress resolver). A module left out only loads slower; one loaded here and not used costs
 * little (its top level, from the cache).
 */
const EARLY_BUILTINS = [
  'node:crypto',
  'node:vm',
  'node:module',
  'node:os',
  'node:fs/promises',
  'node:child_process',
  'node:timers/promises',
  'node:readline',
  'node:readline/promises',
  'node:assert',
  'node:constants',
];
const RUNNING_BUILTINS = ['node:worker_threads', 'node:dns/promises', 'node:perf_hooks'];
const RUNS_CAPABILITIES = new Set(['run', 'ci', 'compare', 'learn', 'wasm', 'mcp']);

// No top-level await: the build bundles this entry as CommonJS (docs/architecture.md, "The built CLI").
async function main(): Promise<never> {
  const load = createRequire(import.meta.url);
  for (const id of EARLY_BUILTINS) load(id);
  if (RUNS_CAPABILITIES.has(argv[0] ?? '')) for (const id of RUNNING_BUILTINS) load(id);
  // The V8 flags are set before the first chunk compiles, so the bundle's code caches (made by the build
  // under the same flags, see code-cache.ts) apply to every chunk; the Wasm runner needs this flag anyway.
  setFlagsFromString('--experimental-wasm-extended-const');
  // These parse a shell command and exit without running any Wasm capability: V8's optimizing tier would
  // only compile the bash grammar's large lexer in the background, and the exit waits for it (~0.4 s of CPU).
  // Commands that run capabilities (run, ci, compare, wasm) and the long-lived mcp server keep it.
  // Set before any chunk compiles: V8 takes a code cache only under the flags it was made with, so these
  // commands read caches of their own (the `liftoff` variant).
  const liftoff = argv[0] === 'key' || argv[0] === 'explain' || argv[0] === 'exec' || argv[0] === 'hook';
  if (liftoff) setFlagsFromString('--liftoff-only');
  const { useCodeCaches } = await import('./code-cache.js');
  useCodeCaches(path.dirname(fileURLToPath(import.meta.url)), {
    write: process.env.CAPSULE_WRITE_CODE_CACHE === '1',
    variant: liftoff ? 'liftoff' : undefined,
  });

  const io = {
    stdin: () => process.stdin,
    signals: process,
    stdout: process.stdout,
    stderr: process.stderr,
    cwd: process.cwd(),
    env: process.env,
    // isatty rather than process.stdin.isTTY: reading process.stdin builds the stream, which costs a
    // command that never reads it (most) a noticeable part of its start-up.
    interactive: isatty(0) && isatty(2),
    exitCode: 0,
  };
  // Claude Code runs the hook on every tool call and waits for it: its plain forms skip the program
  // (commander and every command's registration); --help and the install forms go through it.
  const hook = argv[0] === 'hook' && argv[1] === 'claude' && argv.slice(2).every((a) => a === '--confine');
  const code = hook
    ? await (
        await import('./commands/hook-claude.js')
      ).hookClaude(io, { confine: argv.includes('--confine') })
    : await (await import('./program.js')).runCli(argv, io);
  // Exit explicitly: pooled workers or engine sockets must not keep a finished command alive.
  process.exit(code);
}

void main();
