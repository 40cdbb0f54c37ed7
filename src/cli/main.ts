#!/usr/bin/env node
import { runCli } from './program.js';

const code = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  cwd: process.cwd(),
  env: process.env,
  interactive: Boolean(process.stdin.isTTY && process.stderr.isTTY),
  exitCode: 0,
});
// Exit explicitly: pooled workers or engine sockets must not keep a finished command alive.
process.exit(code);
