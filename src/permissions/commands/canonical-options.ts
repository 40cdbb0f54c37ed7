/**
 * One spelling for a command's leading options, so a deny rule matches every spelling.
 */
import { baseName } from './words.js';

/** Long options that are one short option, for the programs deny rules are usually written for. */
const SHORT_FOR_LONG: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  rm: { recursive: 'r', force: 'f', dir: 'd', verbose: 'v' },
  rmdir: { parents: 'p', verbose: 'v' },
  shred: { remove: 'u', force: 'f', zero: 'z', verbose: 'v' },
  chmod: { recursive: 'R', verbose: 'v' },
  chown: { recursive: 'R', verbose: 'v' },
};

/** Two letters for one option (`rm -R` is `rm -r`). */
const SAME_LETTER: Readonly<Record<string, Readonly<Record<string, string>>>> = { rm: { R: 'r' } };

/**
 * A command's words with its leading short options split and sorted (`rm -rf x`, `rm -fr x` and
 * `rm -r -f x` all become `rm -f -r x`), so a deny rule written with one spelling of the options
 * matches the others. undefined when there is nothing to reorder.
 */
export function canonicalOptions(words: readonly string[]): string | undefined {
  const [program, ...rest] = words;
  if (program === undefined) return undefined;
  const letters = new Set<string>();
  const longs: string[] = [];
  const name = baseName(program);
  const short = SHORT_FOR_LONG[name] ?? {};
  let i = 0;
  for (; i < rest.length; i++) {
    const w = rest[i] as string;
    if (/^-[A-Za-z]+$/.test(w)) for (const l of w.slice(1)) letters.add(SAME_LETTER[name]?.[l] ?? l);
    else if (/^--[A-Za-z][A-Za-z-]*$/.test(w)) {
      // `rm --recursive --force` is `rm -r -f`: a rule written with the letters means it too.
      const letter = Object.hasOwn(short, w.slice(2)) ? short[w.slice(2)] : undefined;
      if (letter !== undefined) letters.add(letter);
      else longs.push(w);
    } else break;
  }
  if (i === 0) return undefined;
  const options = [...[...letters].sort().map((l) => `-${l}`), ...longs.sort()];
  return [program, ...options, ...rest.slice(i)].join(' ');
}
