/**
 * Files a command writes and files it takes code from: one part of a command line may write the code
 * another part runs.
 */
import type { Word } from './words.js';
import { INTERPRETER, SHELLS } from './shells.js';

/** Programs that write the file named by an argument (the last one, or `of=` for dd). */
const FILE_WRITERS = new Set(['tee', 'cp', 'mv', 'install', 'ln', 'dd']);

/** The files a command writes through its arguments (null: a name that is not static). */
export function writtenFiles(name: string, args: readonly Word[]): Word[] {
  if (!FILE_WRITERS.has(name)) return [];
  if (name === 'dd') return args.filter((a) => a === null || a.startsWith('of=')).map((a) => a && a.slice(3));
  const operands = args.filter((a) => a === null || !a.startsWith('-'));
  if (name === 'tee') return operands;
  const last = operands[operands.length - 1];
  return last === undefined ? [] : [last];
}

/**
 * The files a command takes code from when it runs: a script given to a shell or an interpreter,
 * `source FILE`, a program run by its path, make's makefiles, git's configuration. `any` stands for
 * "whatever it finds" (make's default makefiles, git's config): then only the kind of file is known.
 */
export function codeFiles(
  name: string,
  program: string,
  args: readonly Word[],
): Array<Word | 'makefile' | 'git'> {
  if (program.includes('/')) return [program];
  if (name === 'make' || name === 'gmake') {
    const named: Word[] = [];
    for (const [i, a] of args.entries()) {
      if (a === null) named.push(null);
      else if (/^(-f|--file|--makefile)$/.test(a)) named.push(args[i + 1] ?? null);
      else {
        const m = /^(?:-f|--file=|--makefile=)(.+)$/.exec(a);
        if (m?.[1] !== undefined) named.push(m[1]);
      }
    }
    return named.length > 0 ? named : ['makefile'];
  }
  if (name === 'git') return ['git'];
  if (name === 'source' || name === '.' || SHELLS.has(name) || INTERPRETER.test(name)) {
    const script = args.find((a) => a === null || !a.startsWith('-'));
    return script === undefined ? [] : [script];
  }
  return [];
}

/**
 * For deny rules: does a file one part of a command writes hold code another part runs
 * (`printf … > M; make -f M`, `… >> .git/config; git status`, `… > s; bash s`)? What that code does is
 * not on the command line, so it cannot be proven outside a deny rule. Names that are not static match
 * anything; a makefile or git configuration is matched by its usual names.
 */
export function writesCodeItRuns(
  written: readonly Word[],
  runs: ReadonlyArray<Word | 'makefile' | 'git'>,
): boolean {
  if (written.length === 0 || runs.length === 0) return false;
  const base = (p: string): string => p.replace(/^\.\//, '');
  const file = (p: string): string => p.slice(p.lastIndexOf('/') + 1);
  return written.some((w) =>
    runs.some((r) => {
      if (w === null || r === null) return true;
      if (r === 'makefile') return /(^|\/)(GNUmakefile|[Mm]akefile)$/.test(w) || /\.mk$/.test(w);
      if (r === 'git')
        return /(^|\/)\.git(\/|$)/.test(w) || /gitconfig$|\.gitmodules$|\.gitattributes$/.test(w);
      return base(w) === base(r) || file(w) === file(r);
    }),
  );
}
