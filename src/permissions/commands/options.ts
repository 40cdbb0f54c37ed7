/**
 * Reading a program's options the way getopt does: clusters, glued values, abbreviated long options.
 */
import type { Word } from './words.js';

/**
 * How many words an option takes: 2 when its value is the next word. A short cluster is read the way
 * getopt reads it: the first letter that takes a value takes the rest of the cluster, or the next word.
 */
export function optionWidth(arg: string, withValue: readonly string[]): number {
  if (arg.startsWith('--')) return withValue.includes(arg) ? 2 : 1;
  for (let j = 1; j < arg.length; j++) {
    if (withValue.includes(`-${arg[j] as string}`)) return j === arg.length - 1 ? 2 : 1;
  }
  return 1;
}

/**
 * The value of a code option (`-c TEXT`, `--command=TEXT`) of a wrapper, if any. A short one may end a
 * cluster (`script -qc TEXT`) or have its value glued on (`-cTEXT`), as getopt reads them; a letter
 * before it that takes a value (`withValue`) takes the rest of the cluster instead.
 */
export function codeOptionValue(
  args: readonly Word[],
  names: readonly string[],
  withValue: readonly string[] = [],
): { found: boolean; value: Word } {
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === null || a === undefined) continue;
    if (a === '--') break;
    for (const n of names) {
      if (a === n) return { found: true, value: args[i + 1] ?? null };
      if (n.startsWith('--') && a.startsWith(`${n}=`)) return { found: true, value: a.slice(n.length + 1) };
    }
    if (/^-[A-Za-z]/.test(a) && !a.startsWith('--')) {
      for (let j = 1; j < a.length; j++) {
        const letter = `-${a[j] as string}`;
        if (names.includes(letter))
          return j === a.length - 1
            ? { found: true, value: args[i + 1] ?? null }
            : { found: true, value: a.slice(j + 1) };
        if (withValue.includes(letter)) break;
      }
    }
  }
  return { found: false, value: null };
}

export function longOptionHazard(arg: string, names: readonly string[]): string | undefined {
  if (!arg.startsWith('--') || arg.length <= 3) return undefined;
  const name = arg.split('=', 1)[0] ?? arg;
  // getopt-style parsers accept any unambiguous abbreviation (`--out=x` is `--output=x`).
  return names.find((n) => n === name || n.startsWith(name));
}

export function shortCluster(arg: string): string | undefined {
  return /^-[A-Za-z0-9]+$/.test(arg) ? arg.slice(1) : undefined;
}
