/**
 * The words of a command, and what it runs. This folder (pure, no I/O but the parser's grammar) says
 * what a parsed simple command does, as far as the permission engine needs to know:
 * which program really runs after wrappers (`env`, `nice`, `xargs`, `sudo`, `find -exec` …), which
 * strings are shell code run later (`sh -c`, `eval`, `trap`), which builtins evaluate code hidden in
 * their arguments (`printf -v 'a[$(…)]'`), and which options of a program run other programs
 * (`git -c alias.x=!cmd`, `tar --to-command`). The parser (parser.ts) turns bash text into words;
 * the other files judge the words.
 *
 * A word is its static value as bash would pass it, or `null` when it depends on run time (a variable,
 * a substitution, a glob). Nothing here can be proven about a null word.
 */
export type Word = string | null;

/** One program that runs, with the arguments it gets. */
export interface EffectiveCommand {
  /** The program as written (quotes removed); null when not static. */
  program: string | null;
  /** The program's name: the last path segment (`/bin/rm` → `rm`); null when not static. */
  name: string | null;
  args: Word[];
}

export interface Unwrapped {
  /** The command itself and every program it makes run (a wrapper's target, find -exec's command …). */
  commands: EffectiveCommand[];
  /** Shell code it runs (`sh -c TEXT`, `eval TEXT`, `trap TEXT`); null: code that is not static. */
  scripts: Word[];
  /** Why what runs cannot be known (reads code from stdin, an unknown wrapper operand …). */
  unprovable: string[];
}

export function baseName(program: string): string {
  const i = program.lastIndexOf('/');
  return i < 0 || i === program.length - 1 ? program : program.slice(i + 1);
}

export function effective(program: Word, args: readonly Word[]): EffectiveCommand {
  return { program, name: program === null ? null : baseName(program), args: [...args] };
}

export function joinWords(words: readonly Word[]): Word {
  if (words.some((w) => w === null)) return null;
  return words.join(' ');
}
