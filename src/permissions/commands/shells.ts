/**
 * Shells, the builtins that evaluate code hidden in their arguments, and interpreters: the programs
 * whose words may be code rather than data.
 */
import type { Word } from './words.js';

/** Shells: `-c TEXT` runs TEXT; no operand at all reads code from stdin. */
export const SHELLS = new Set([
  'sh',
  'bash',
  'dash',
  'zsh',
  'ksh',
  'mksh',
  'ash',
  'yash',
  'posh',
  'fish',
  'rbash',
]);

/**
 * Builtins that evaluate code hidden in their arguments (array subscripts are arithmetic, which runs
 * `$(…)`), run a callback, or change what a later word runs. Keyed by the whole string, never by name.
 */
export const EVALUATING_BUILTINS = new Set([
  'eval',
  'source',
  '.',
  'exec',
  'command',
  'builtin',
  'trap',
  'alias',
  'unalias',
  'enable',
  'coproc',
  'time',
  'function',
  'let',
  'read',
  'mapfile',
  'readarray',
  'declare',
  'typeset',
  'local',
  'export',
  'readonly',
  'unset',
  'jobs',
  'compgen',
  'complete',
  'compopt',
  'hash',
  'ulimit',
  'wait',
  'getopts',
  'fc',
  'bind',
  'shopt',
  'set',
  'caller',
  'disown',
  'kill',
  'history',
]);

/** `printf -v NAME` and `test -v NAME` evaluate NAME's subscript; plain use does not. */
export function optionEvaluates(name: string, args: readonly Word[]): boolean {
  if (name === 'printf') {
    const first = args[0];
    return first === null || (first !== undefined && first.startsWith('-') && first !== '--');
  }
  if (name === 'test' || name === '[') return args.some((a) => a === null || a === '-v' || a === '-R');
  return false;
}

/** Is this a builtin that evaluates code in its arguments (for deny rules: unprovable if so)? */
export function evaluatesArguments(program: string, args: readonly Word[]): boolean {
  return EVALUATING_BUILTINS.has(program) || optionEvaluates(program, args);
}

type ShellCode = { kind: 'script'; value: Word } | { kind: 'stdin' } | { kind: 'file' };

/** bash [-options] -c TEXT …, bash FILE …, or bash alone (stdin). Short options may be clustered (-ec). */
export function shellScript(args: readonly Word[]): ShellCode {
  let wantsCode = false;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === null || a === undefined) return { kind: 'script', value: null };
    if (a === '--' || a === '-')
      return wantsCode
        ? { kind: 'script', value: args[i + 1] ?? null }
        : i + 1 < args.length
          ? { kind: 'file' }
          : { kind: 'stdin' };
    if (a === '-o' || a === '+o' || a === '-O' || a === '+O' || a === '--rcfile' || a === '--init-file') {
      i++;
      continue;
    }
    if (/^[-+][A-Za-z]+$/.test(a)) {
      if (a.startsWith('-') && a.includes('c')) wantsCode = true;
      if (a.startsWith('-') && a.includes('s') && !wantsCode) return { kind: 'stdin' };
      continue;
    }
    if (a.startsWith('--')) continue;
    return wantsCode ? { kind: 'script', value: a } : { kind: 'file' };
  }
  return wantsCode ? { kind: 'script', value: null } : { kind: 'stdin' };
}

/** Interpreters whose options take program text inline (`python3 -c`, `perl -e`, `node -e`). */
export const INTERPRETER =
  /^(expect|python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby|node|nodejs|deno|bun|php|lua[0-9.]*|luajit|tclsh|wish|osascript|pwsh|Rscript|julia)$/;
