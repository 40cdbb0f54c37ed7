/**
 * unwrap(): every program a simple command makes run and the shell code it runs, through wrappers,
 * `env`, `xargs`, `find -exec`, shells, `eval`, `trap` and git.
 */
import { baseName, effective, joinWords, type Unwrapped, type Word } from './words.js';
import { SHELLS, shellScript } from './shells.js';
import { SSH_WITH_VALUE, wrapperSpec, commandStart } from './wrappers.js';
import { codeOptionValue, optionWidth } from './options.js';
import { gitCommand } from './git.js';

/**
 * The programs a simple command makes run, and the shell code it runs. Inclusive: every program that
 * may run is listed (the wrapper itself first), so a deny rule can match any of them.
 */
export function unwrap(program: Word, args: readonly Word[], depth = 0): Unwrapped {
  const out: Unwrapped = { commands: [effective(program, args)], scripts: [], unprovable: [] };
  if (program === null) {
    out.unprovable.push('the program is not static');
    return out;
  }
  if (depth > 16) {
    out.unprovable.push('wrappers nested too deeply');
    return out;
  }
  const name = baseName(program);
  const inner = (start: number | null, from: readonly Word[] = args): void => {
    if (start === null) {
      out.unprovable.push(`${name}: an option is not static, so the command it runs is unknown`);
      return;
    }
    if (start < 0) return;
    const next = unwrap(from[start] ?? null, from.slice(start + 1), depth + 1);
    out.commands.push(...next.commands);
    out.scripts.push(...next.scripts);
    out.unprovable.push(...next.unprovable);
  };

  if (SHELLS.has(name)) {
    const c = shellScript(args);
    if (c.kind === 'script') out.scripts.push(c.value);
    else if (c.kind === 'stdin') out.unprovable.push(`${name} reads shell code from its input`);
    return out;
  }
  if (name === 'eval') {
    if (args.length > 0) out.scripts.push(joinWords(args));
    return out;
  }
  if (name === 'trap') {
    // trap [-lp] [ACTION] SIGNAL…: the action is shell code run later.
    const rest = args.filter((a) => a === null || (!/^-[lp]+$/.test(a) && a !== '--'));
    if (rest.length >= 2) out.scripts.push(rest[0] ?? null);
    return out;
  }
  if (name === 'env') {
    envCommand(args, inner, out);
    return out;
  }
  if (name === 'xargs') {
    const start = commandStart(args, {
      withValue: [
        '-a',
        '--arg-file',
        '-d',
        '--delimiter',
        '-E',
        '-e',
        '-I',
        '-i',
        '-L',
        '-l',
        '-n',
        '--max-args',
        '-P',
        '--max-procs',
        '-s',
        '--max-chars',
        '--process-slot-var',
      ],
    });
    // The arguments come from stdin: the command gets words nobody can see here.
    if (start === -1) out.commands.push(effective('echo', [null]));
    else inner(start, [...args, null]);
    return out;
  }
  if (name === 'busybox' || name === 'toybox') {
    inner(args.length > 0 ? 0 : -1);
    return out;
  }
  if (name === 'find') {
    findCommand(args, inner, out);
    return out;
  }
  if (name === 'jobs') {
    const i = args.indexOf('-x');
    if (i >= 0) inner(i + 1 < args.length ? i + 1 : -1);
    return out;
  }
  if (name === 'compgen' || name === 'complete') {
    const c = codeOptionValue(args, ['-C']);
    if (c.found) out.scripts.push(c.value);
    if (args.some((a) => a === null)) out.unprovable.push(`${name}: an argument is not static`);
    return out;
  }
  if (name === 'mapfile' || name === 'readarray') {
    const c = codeOptionValue(args, ['-C']);
    if (c.found) out.scripts.push(c.value === null ? null : `${c.value} 0 x`);
    return out;
  }
  if (name === 'git') {
    gitCommand(args, out, (gitArgs) => unwrap('git', gitArgs, depth + 1));
    return out;
  }
  if (name === 'ssh') {
    // ssh HOST COMMAND…: the command runs in a shell on HOST (which may be this machine).
    const start = commandStart(args, { withValue: SSH_WITH_VALUE, operands: 1 });
    if (start === null) out.unprovable.push('ssh: an option is not static');
    else if (start >= 0) out.scripts.push(joinWords(args.slice(start)));
    return out;
  }
  const spec = wrapperSpec(name);
  if (spec !== undefined) {
    if (spec.codeOption !== undefined) {
      const c = codeOptionValue(args, spec.codeOption, spec.withValue);
      if (c.found) {
        out.scripts.push(c.value);
        return out;
      }
    }
    const start = commandStart(args, spec);
    if (spec.joined === true && start !== null && start >= 0) out.scripts.push(joinWords(args.slice(start)));
    else inner(start);
  }
  return out;
}

function envCommand(
  args: readonly Word[],
  inner: (start: number | null, from?: readonly Word[]) => void,
  out: Unwrapped,
): void {
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === null || a === undefined) {
      inner(null);
      return;
    }
    if (a === '--') {
      inner(i + 1 < args.length ? i + 1 : -1);
      return;
    }
    if (a === '-S' || a === '--split-string') {
      out.scripts.push(joinWords(args.slice(i + 1)));
      return;
    }
    if (a.startsWith('--split-string=')) {
      out.scripts.push(joinWords([a.slice('--split-string='.length), ...args.slice(i + 1)]));
      return;
    }
    // -S in a cluster (`-iS 'rm v'`, `-S'rm v'`): the rest of the cluster, or the next words, is code.
    const split = /^-([A-Za-z]*?)S([\s\S]*)$/.exec(a);
    if (split !== null && !/[uCP]/.test(split[1] ?? '')) {
      const first = split[2] ?? '';
      out.scripts.push(joinWords(first === '' ? args.slice(i + 1) : [first, ...args.slice(i + 1)]));
      return;
    }
    if (a.startsWith('-') && a !== '-') {
      i += optionWidth(a, ['-u', '--unset', '-C', '--chdir', '-P']) - 1;
      continue;
    }
    if (a === '-') continue;
    if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(a)) continue;
    inner(i);
    return;
  }
}

function findCommand(
  args: readonly Word[],
  inner: (start: number | null, from?: readonly Word[]) => void,
  out: Unwrapped,
): void {
  const starts: string[] = [];
  for (const a of args) {
    if (a === null || a.startsWith('-') || a === '(' || a === '!') break;
    starts.push(a);
  }
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === null || a === undefined) {
      out.unprovable.push('find: an argument is not static');
      continue;
    }
    if (a === '-exec' || a === '-execdir' || a === '-ok' || a === '-okdir') {
      let end = i + 1;
      while (end < args.length && args[end] !== ';' && args[end] !== '+') end++;
      const cmd = args.slice(i + 1, end);
      if (cmd.length > 0) inner(0, cmd);
      i = end;
    } else if (a === '-delete') {
      // find deletes by itself: judged as the rm it stands for.
      const paths = starts.length > 0 ? starts : ['.'];
      for (const flags of [[], ['-r'], ['-f'], ['-rf'], ['-fr'], ['-R']])
        out.commands.push(effective('rm', [...flags, ...paths]));
    }
  }
}

/** Programs that unwrap() looks into besides the wrapper table. */
export const UNWRAPPED = new Set([
  'eval',
  'trap',
  'env',
  'xargs',
  'busybox',
  'toybox',
  'find',
  'jobs',
  'compgen',
  'complete',
  'mapfile',
  'readarray',
  'git',
  'ssh',
]);
