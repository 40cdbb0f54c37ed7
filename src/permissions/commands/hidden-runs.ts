/**
 * For deny rules: programs that run code capsule cannot list from the command line, either named by a
 * repository file (implicitRuns) or hidden in an option or a stream (hiddenRuns).
 */
import type { Word } from './words.js';
import { GIT_READ_ONLY, parseGit } from './git.js';
import { INTERPRETER, SHELLS, evaluatesArguments } from './shells.js';
import { programHazard } from './hazards.js';
import { wrapperSpec } from './wrappers.js';

/**
 * Programs that run other programs without naming them on the command line: a repository file
 * (Makefile, package.json scripts, git hooks and configuration) or a script decides what runs. A rule
 * that names such a program admits programs it does not name. undefined: nothing known.
 */
export function implicitRuns(name: string, args: readonly Word[]): string | undefined {
  switch (name) {
    case 'git': {
      const g = parseGit(args);
      if (g.sub < 0) return undefined;
      const sub = args[g.sub];
      if (sub === null || sub === undefined) return 'the git sub-command is not static';
      if (GIT_READ_ONLY.has(sub)) return undefined;
      return `git ${sub} runs hooks, editors, credential helpers, ssh or drivers from git configuration`;
    }
    case 'make':
    case 'gmake':
    case 'ninja':
    case 'just':
    case 'rake':
      return `${name} runs the commands of a build file in the repository`;
    case 'npm':
    case 'pnpm':
    case 'yarn':
    case 'bun':
    case 'npx':
      return `${name} runs package scripts or downloaded packages`;
    case 'cargo':
    case 'go':
    case 'mvn':
    case 'gradle':
    case 'pip':
    case 'pip3':
    case 'poetry':
      return `${name} runs build scripts of the project or its dependencies`;
    default:
      if (SHELLS.has(name) || /^(python[0-9.]*|node|perl|ruby|php|lua|deno|tclsh)$/.test(name))
        return args.length === 0 ? undefined : `${name} runs the code of a script or an argument`;
      return undefined;
  }
}

/**
 * Variables that load code or choose what a program name means, or where a program finds the
 * configuration that names the programs it runs (git's `core.fsmonitor`, `core.pager`, aliases …).
 */
export const LOADS_CODE =
  /^(PATH|LD_PRELOAD|LD_AUDIT|LD_LIBRARY_PATH|BASH_ENV|ENV|BASH_LOADABLES_PATH|PROMPT_COMMAND|PS4|SHELLOPTS|BASHOPTS|HOME|XDG_CONFIG_HOME|GIT_CONFIG_PARAMETERS|GIT_CONFIG_GLOBAL|GIT_CONFIG_SYSTEM|GIT_CONFIG|GIT_DIR|GIT_EXEC_PATH|GIT_TEMPLATE_DIR)$/;

/** Package runners that run a program or shell code named in their arguments. */
export const PACKAGE_RUNNERS = new Set(['npx', 'pnpx', 'bunx']);

export const PACKAGE_MANAGERS = new Set(['npm', 'pnpm', 'yarn', 'bun']);

/** Programs unwrap() already looks inside (their commands are listed, not hidden). */
const LOOKED_INTO = new Set([
  'git',
  'find',
  'ssh',
  'xargs',
  'env',
  'busybox',
  'toybox',
  'jobs',
  'compgen',
  'complete',
]);

/**
 * For deny rules: a command that runs code the parser cannot list (an awk `system()`, `python3 -c`,
 * `tar --to-command`, an alias that renames a program, `hash -p`, a script read from /dev/stdin).
 * What it runs cannot be proven outside a deny rule. undefined: nothing hidden.
 */
export function hiddenRuns(name: string, args: readonly Word[]): string | undefined {
  if (name === 'alias' && args.some((a) => a === null || a.includes('=')))
    return 'alias can make any word run any program';
  if (name === 'hash' && args.some((a) => a === null || /^-[A-Za-z]*p/.test(a)))
    return 'hash -p makes a name run another program';
  if (name === 'enable') return 'enable changes which builtins exist';
  if (name === 'at' || name === 'batch' || name === 'crontab') return `${name} runs commands it reads later`;
  if (
    evaluatesArguments(name, args) &&
    args.some(
      (a) => a === null || a.includes('PATH') || (a.length < 40 && LOADS_CODE.test(a.split('=')[0] ?? '')),
    )
  )
    return `${name} may change PATH or a variable that loads code: a program name may run another program`;
  if (PACKAGE_RUNNERS.has(name)) return `${name} runs a program named by its arguments`;
  if (PACKAGE_MANAGERS.has(name) && args.some((a) => a === null || /^(exec|x|dlx|-c|--call(=.*)?)$/.test(a)))
    return `${name} exec runs a program or shell code named by its arguments`;
  if (name === 'make' || name === 'gmake') {
    for (const [i, a] of args.entries()) {
      if (a === null) return `${name}: an argument is not static`;
      if (/^(--eval|-E)/.test(a)) return `${name} --eval runs recipes given inline`;
      const file = /^(-f|--file|--makefile)$/.test(a)
        ? args[i + 1]
        : /^(?:-f|--file=|--makefile=)(.+)$/.exec(a)?.[1];
      if (file === null || (file !== undefined && (file === '-' || /^\/(dev|proc)\//.test(file))))
        return `${name} reads recipes from a stream`;
    }
  }
  if (name === 'ssh' || name === 'scp' || name === 'sftp') return programHazard(name, args);
  if (name === 'source' || name === '.' || SHELLS.has(name)) {
    const file = args.find((a) => a === null || !a.startsWith('-'));
    if (file === null || (file !== undefined && /^\/(dev|proc)\//.test(file)))
      return `${name} reads code from a stream or a name that is not static`;
  }
  if (INTERPRETER.test(name)) {
    for (const a of args) {
      if (a === null) return `${name}: an argument is not static`;
      if (/^-[A-Za-z]*[ceErpx]/.test(a) || /^--(eval|exec|print|command)/.test(a))
        return `${name} runs program text given inline`;
      if (a === '-') return `${name} reads program text from stdin`;
      if (!a.startsWith('-'))
        return /^\/(dev|proc)\//.test(a) ? `${name} reads program text from a stream` : undefined;
    }
    // No script operand: the interpreter reads its program from stdin, as `bash` alone does.
    if (args.some((a) => a !== null && /^(--version|-V|--help|-h)$/.test(a))) return undefined;
    return `${name} reads program text from stdin`;
  }
  if (LOOKED_INTO.has(name) || wrapperSpec(name) !== undefined) return undefined;
  return programHazard(name, args);
}
