import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import type { CliInput, SignalSource } from '../../src/cli/output.js';
import { runCli } from '../../src/cli/program.js';
import { memoryIO } from './io.js';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BUILT_CLI = path.join(REPO_ROOT, 'dist', 'cli', 'main.js');

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Run the CLI in-process (same code path as the binary, minus process.exit). */
export async function cli(
  args: string[],
  options: {
    cwd?: string;
    env?: NodeJS.ProcessEnv;
    stdin?: CliInput;
    signals?: SignalSource;
  } = {},
): Promise<CliRun> {
  const mem = memoryIO({
    cwd: options.cwd ?? REPO_ROOT,
    env: options.env ?? process.env,
    stdin: options.stdin,
    signals: options.signals,
  });
  const code = await runCli(args, mem.io);
  return { code, stdout: mem.stdout(), stderr: mem.stderr() };
}

/** Run the built binary (`npm run build` first; scripts/test.mjs does). */
export async function builtCli(
  args: string[],
  options: { cwd?: string; input?: string } = {},
): Promise<CliRun> {
  if (!existsSync(BUILT_CLI)) throw new Error(`${BUILT_CLI} is missing: run "npm run build" first`);
  const r = await execa('node', [BUILT_CLI, ...args], {
    cwd: options.cwd ?? REPO_ROOT,
    reject: false,
    input: options.input ?? '',
    timeout: 60_000,
  });
  return { code: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** The key the built CLI gives a command (`capsule key --json`): the exact grant that allows it. */
export async function commandKey(command: string): Promise<string> {
  const keyed = await execa(process.execPath, [BUILT_CLI, 'key', '--json', '--', command]);
  return (JSON.parse(keyed.stdout) as { key: string }).key;
}
