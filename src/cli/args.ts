import { CapsuleError } from '../base/errors.js';
import { ENVIRONMENTS } from '../project/environments.js';
import type { Environment } from '../manifest/types.js';
import { shellWord } from '../base/shell-quote.js';

/* Argument parsing more than one command shares (light: loaded before any command runs). */

/**
 * The command after `--`: one word is the command line as given (`-- 'git status && ls'`); several
 * words (`-- git commit -m "a b"`) are re-quoted one by one, so the shell sees the same words.
 */
export function commandLine(words: readonly string[]): string {
  const command = words.length === 1 ? (words[0] as string) : words.map(shellWord).join(' ');
  if (command.trim() === '') {
    throw new CapsuleError('USAGE', 'No command given.', {
      hint: `Pass it after --, e.g. -- 'git status && ls'.`,
    });
  }
  return command;
}

/** A flag's value as a positive integer (at most `max` when given), or a usage error naming the flag. */
export function positiveInt(value: string, flag: string, max?: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    throw new CapsuleError('USAGE', `${flag} must be a positive integer, got "${value}"`, { field: flag });
  }
  if (max !== undefined && n > max) {
    throw new CapsuleError('USAGE', `${flag} must be at most ${max}, got ${n}`, { field: flag });
  }
  return n;
}

/** `--env shell,wasm`: the environments asked for, each once. */
export function parseEnvs(value: string): Environment[] {
  const envs = value
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean);
  const bad = envs.filter((e) => !(ENVIRONMENTS as readonly string[]).includes(e));
  if (bad.length > 0 || envs.length === 0) {
    throw new CapsuleError('USAGE', `--env ${value}: unknown environment ${bad.join(', ')}`.trim(), {
      hint: 'Use a comma list of shell, wasm, docker.',
    });
  }
  return [...new Set(envs)] as Environment[];
}
