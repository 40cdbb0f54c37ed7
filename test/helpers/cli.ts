import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import type { CliInput, SignalSource } from '../../src/cli/output.js';
import { runCli } from '../../src/cli/program.js';

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
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (c: Buffer) => (out += c.toString()));
  stderr.on('data', (c: Buffer) => (err += c.toString()));
  const code = await runCli(args, {
    stdin: () => options.stdin ?? new PassThrough({}).end(),
    signals: options.signals ?? new EventEmitter(),
    stdout,
    stderr,
    cwd: options.cwd ?? REPO_ROOT,
    env: options.env ?? process.env,
    interactive: false,
    exitCode: 0,
  });
  return { code, stdout: out, stderr: err };
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
