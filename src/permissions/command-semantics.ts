/**
 * What a parsed simple command does, as far as the permission engine needs to know (pure, no I/O):
 * which program really runs after wrappers (`env`, `nice`, `xargs`, `sudo`, `find -exec` …), which
 * strings are shell code run later (`sh -c`, `eval`, `trap`), which builtins evaluate code hidden in
 * their arguments (`printf -v 'a[$(…)]'`), and which options of a program run other programs
 * (`git -c alias.x=!cmd`, `tar --to-command`). The parser (command-parser.ts) turns bash text into
 * words; this module judges the words.
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

/** Shells: `-c TEXT` runs TEXT; no operand at all reads code from stdin. */
const SHELLS = new Set(['sh', 'bash', 'dash', 'zsh', 'ksh', 'mksh', 'ash', 'yash', 'posh', 'fish', 'rbash']);

/**
 * Builtins that evaluate code hidden in their arguments (array subscripts are arithmetic, which runs
 * `$(…)`), run a callback, or change what a later word runs. Keyed by the whole string, never by name.
 */
const EVALUATING_BUILTINS = new Set([
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
function optionEvaluates(name: string, args: readonly Word[]): boolean {
  if (name === 'printf') {
    const first = args[0];
    return first === null || (first !== undefined && first.startsWith('-') && first !== '--');
  }
  if (name === 'test' || name === '[') return args.some((a) => a === null || a === '-v' || a === '-R');
  return false;
}

/**
 * Why a simple command is not keyed by its program: it evaluates code, wraps another program, or uses a
 * program's option that runs other programs. undefined: the program's name is its key.
 */
export function keyingHazard(program: string, args: readonly Word[]): string | undefined {
  if (EVALUATING_BUILTINS.has(program)) return `${program} evaluates code in its arguments`;
  if (optionEvaluates(program, args)) return `${program} with this option evaluates code in its arguments`;
  const name = baseName(program);
  const hazard = programHazard(name, args);
  if (hazard !== undefined) return `${name}: ${hazard}`;
  const unwrapped = unwrap(program, args);
  // git without global options lists itself a second time (the form deny rules are written for).
  const others = unwrapped.commands.slice(1).filter((c) => !(name === 'git' && c.name === 'git'));
  if (others.length > 0 || unwrapped.scripts.length > 0 || unwrapped.unprovable.length > 0)
    return `${name} runs another program or shell code`;
  return undefined;
}

/** Is this a builtin that evaluates code in its arguments (for deny rules: unprovable if so)? */
export function evaluatesArguments(program: string, args: readonly Word[]): boolean {
  return EVALUATING_BUILTINS.has(program) || optionEvaluates(program, args);
}

export function baseName(program: string): string {
  const i = program.lastIndexOf('/');
  return i < 0 || i === program.length - 1 ? program : program.slice(i + 1);
}

function effective(program: Word, args: readonly Word[]): EffectiveCommand {
  return { program, name: program === null ? null : baseName(program), args: [...args] };
}

/** Option spec of a wrapper: flags taking a separate value; `fixed` positional words before the command. */
interface WrapperSpec {
  /** Short and long options that take a value (`-n 5`, `--signal TERM`); `--opt=value` is handled. */
  withValue: readonly string[];
  /** Positional operands consumed before the command (timeout's DURATION, chroot's NEWROOT). */
  operands?: number;
  /** The command is run through `sh -c` with the remaining words joined (watch). */
  joined?: boolean;
  /** A flag whose value is shell code (su -c, flock -c, script -c). */
  codeOption?: readonly string[];
}

const WRAPPERS: Record<string, WrapperSpec> = {
  command: { withValue: [] },
  builtin: { withValue: [] },
  exec: { withValue: ['-a'] },
  nohup: { withValue: [] },
  time: { withValue: ['-f', '--format', '-o', '--output'] },
  nice: { withValue: ['-n', '--adjustment'] },
  ionice: { withValue: ['-c', '--class', '-n', '--classdata', '-p', '--pid', '-P', '--pgid', '-u', '--uid'] },
  timeout: { withValue: ['-s', '--signal', '-k', '--kill-after'], operands: 1 },
  stdbuf: { withValue: ['-i', '--input', '-o', '--output', '-e', '--error'] },
  setsid: { withValue: [] },
  chrt: { withValue: [], operands: 1 },
  taskset: { withValue: [], operands: 1 },
  sudo: {
    withValue: [
      '-u',
      '--user',
      '-g',
      '--group',
      '-C',
      '--close-from',
      '-D',
      '--chdir',
      '-h',
      '--host',
      '-p',
      '--prompt',
      '-r',
      '--role',
      '-t',
      '--type',
      '-U',
      '--other-user',
      '-T',
      '--command-timeout',
      '-R',
      '--chroot',
    ],
  },
  doas: { withValue: ['-u', '-C'] },
  runuser: {
    withValue: ['-u', '--user', '-g', '--group', '-G', '--supp-group', '-s', '--shell'],
    codeOption: ['-c', '--command'],
  },
  su: {
    withValue: ['-g', '--group', '-G', '--supp-group', '-s', '--shell'],
    codeOption: ['-c', '--command', '--session-command'],
  },
  flock: {
    withValue: ['-w', '--timeout', '-E', '--conflict-exit-code'],
    operands: 1,
    codeOption: ['-c', '--command'],
  },
  script: {
    withValue: [
      '-E',
      '--echo',
      '-I',
      '--log-in',
      '-O',
      '--log-out',
      '-B',
      '--log-io',
      '-T',
      '--log-timing',
      '-m',
      '--logging-format',
    ],
    codeOption: ['-c', '--command'],
  },
  watch: { withValue: ['-n', '--interval', '-d', '--differences', '-q', '--equexit'], joined: true },
  unbuffer: { withValue: [] },
  chroot: { withValue: ['--userspec', '--groups'], operands: 1 },
  coproc: { withValue: [] },
  parallel: {
    withValue: [
      '-j',
      '--jobs',
      '-S',
      '--sshlogin',
      '-a',
      '--arg-file',
      '-d',
      '--delimiter',
      '-I',
      '-C',
      '--colsep',
    ],
  },
  strace: { withValue: ['-e', '-o', '-p', '-s', '-u', '-E', '-a', '-b', '-I', '-O', '-S', '-P', '-X'] },
  ltrace: { withValue: ['-e', '-o', '-p', '-s', '-u', '-a', '-A', '-D', '-F', '-l', '-n', '-x'] },
  valgrind: { withValue: [] },
  catchsegv: { withValue: [] },
  firejail: { withValue: [] },
  'start-stop-daemon': { withValue: [] },
  'systemd-run': {
    withValue: [
      '-p',
      '--property',
      '-u',
      '--unit',
      '-M',
      '--machine',
      '-E',
      '--setenv',
      '--uid',
      '--gid',
      '--working-directory',
      '-H',
      '--host',
    ],
  },
  nsenter: {
    withValue: ['-t', '--target', '-S', '--setuid', '-G', '--setgid', '-w', '--wd', '-r', '--root'],
  },
  unshare: {
    withValue: [
      '-S',
      '--setuid',
      '-G',
      '--setgid',
      '-R',
      '--root',
      '-w',
      '--wd',
      '--map-user',
      '--map-group',
    ],
  },
  prlimit: { withValue: ['-p', '--pid', '-o', '--output'] },
  proot: { withValue: ['-r', '-b', '-w'] },
  fakeroot: { withValue: ['-l', '--lib', '--faked', '-s', '-i'] },
};

/**
 * How many words an option takes: 2 when its value is the next word. A short cluster is read the way
 * getopt reads it: the first letter that takes a value takes the rest of the cluster, or the next word.
 */
function optionWidth(arg: string, withValue: readonly string[]): number {
  if (arg.startsWith('--')) return withValue.includes(arg) ? 2 : 1;
  for (let j = 1; j < arg.length; j++) {
    if (withValue.includes(`-${arg[j] as string}`)) return j === arg.length - 1 ? 2 : 1;
  }
  return 1;
}

/** Where the wrapped command starts in `args`, or -1 (none), or null (cannot tell). */
function commandStart(args: readonly Word[], spec: WrapperSpec): number | null {
  let i = 0;
  let operands = spec.operands ?? 0;
  while (i < args.length) {
    const a = args[i];
    if (a === null || a === undefined) return null;
    if (a === '--') {
      i++;
      break;
    }
    if (a.startsWith('-') && a !== '-') {
      i += optionWidth(a, spec.withValue);
      continue;
    }
    if (operands > 0) {
      operands--;
      i++;
      continue;
    }
    break;
  }
  while (operands > 0 && i < args.length) {
    operands--;
    i++;
  }
  return i < args.length ? i : -1;
}

/**
 * The value of a code option (`-c TEXT`, `--command=TEXT`) of a wrapper, if any. A short one may end a
 * cluster (`script -qc TEXT`) or have its value glued on (`-cTEXT`), as getopt reads them; a letter
 * before it that takes a value (`withValue`) takes the rest of the cluster instead.
 */
function codeOptionValue(
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

function joinWords(words: readonly Word[]): Word {
  if (words.some((w) => w === null)) return null;
  return words.join(' ');
}

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
    gitCommand(args, out, depth);
    return out;
  }
  if (name === 'ssh') {
    // ssh HOST COMMAND…: the command runs in a shell on HOST (which may be this machine).
    const start = commandStart(args, { withValue: SSH_WITH_VALUE, operands: 1 });
    if (start === null) out.unprovable.push('ssh: an option is not static');
    else if (start >= 0) out.scripts.push(joinWords(args.slice(start)));
    return out;
  }
  const spec = WRAPPERS[name];
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

type ShellCode = { kind: 'script'; value: Word } | { kind: 'stdin' } | { kind: 'file' };

/** bash [-options] -c TEXT …, bash FILE …, or bash alone (stdin). Short options may be clustered (-ec). */
function shellScript(args: readonly Word[]): ShellCode {
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

const SSH_WITH_VALUE = [
  '-b',
  '-c',
  '-D',
  '-E',
  '-e',
  '-F',
  '-I',
  '-i',
  '-J',
  '-L',
  '-l',
  '-m',
  '-O',
  '-o',
  '-p',
  '-Q',
  '-R',
  '-S',
  '-W',
  '-w',
  '-B',
];

/** git's global options that take a separate value (`git -C DIR`, `git -c NAME=VALUE`). */
const GIT_GLOBAL_WITH_VALUE = new Set([
  '-C',
  '-c',
  '--git-dir',
  '--work-tree',
  '--namespace',
  '--config-env',
  '--super-prefix',
  '--exec-path',
  '--attr-source',
  '--list-cmds',
]);

/** Global options that neither run programs nor point git at other configuration. */
const GIT_SAFE_GLOBAL = new Set([
  '--no-pager',
  '-P',
  '--no-replace-objects',
  '--literal-pathspecs',
  '--glob-pathspecs',
  '--noglob-pathspecs',
  '--icase-pathspecs',
  '--no-optional-locks',
  '--no-advice',
  '--version',
  '-v',
  '--html-path',
  '--man-path',
  '--info-path',
]);

/**
 * git's own commands. Anything else may be an alias from a configuration file capsule cannot see
 * (`alias.p = push`), so a deny rule naming git cannot be proven not to match it.
 */
const GIT_COMMANDS = new Set(
  (
    'add am annotate apply archive bisect blame branch bugreport bundle cat-file check-attr check-ignore ' +
    'check-mailmap check-ref-format checkout checkout-index cherry cherry-pick citool clean clone column ' +
    'commit commit-graph commit-tree config count-objects credential describe diff diff-files diff-index ' +
    'diff-tree difftool fast-export fast-import fetch fetch-pack filter-branch fmt-merge-msg for-each-ref ' +
    'for-each-repo format-patch fsck gc get-tar-commit-id grep gui hash-object help init instaweb ' +
    'interpret-trailers log ls-files ls-remote ls-tree mailinfo mailsplit maintenance merge merge-base ' +
    'merge-file merge-index merge-tree mergetool mktag mktree multi-pack-index mv name-rev notes pack-objects ' +
    'pack-refs prune pull push range-diff read-tree rebase reflog remote repack replace request-pull rerere ' +
    'reset restore rev-list rev-parse revert rm send-email shortlog show show-branch show-index show-ref ' +
    'sparse-checkout stash status stripspace submodule switch symbolic-ref tag unpack-file unpack-objects ' +
    'update-index update-ref update-server-info var verify-commit verify-pack verify-tag version whatchanged ' +
    'worktree write-tree'
  ).split(' '),
);

/** Sub-commands that run programs named by configuration or arguments, or write configuration. */
const GIT_HAZARDOUS_COMMANDS = new Set([
  'difftool',
  'mergetool',
  'filter-branch',
  'submodule',
  'bisect',
  'config',
  'send-email',
  'instaweb',
  'gui',
  'citool',
  'credential',
  'maintenance',
  'for-each-repo',
  'daemon',
  'shell',
  'upload-pack',
  'receive-pack',
  'remote-ext',
  'web--browse',
  'help',
]);

/** Long options (any sub-command) that run a program or write to a file named in the option. */
const GIT_HAZARDOUS_LONG = [
  '--ext-diff',
  '--output',
  '--open-files-in-pager',
  '--upload-pack',
  '--receive-pack',
  '--exec',
  '--config',
  '--template',
  '--extcmd',
  '--tool',
  '--command',
  '--run',
  '--interactive',
  '--edit',
  '--textconv',
  '--separate-git-dir',
  '--reference',
];

/** Short options that run a program for one sub-command (`grep -O CMD`, `rebase -x CMD`, `clone -u`). */
const GIT_HAZARDOUS_SHORT: Record<string, string> = {
  grep: 'O',
  rebase: 'xi',
  clone: 'uc',
  commit: 'e',
  'ls-remote': 'u',
  fetch: '',
  archive: 'o',
  'format-patch': 'o',
  tag: 'e',
  merge: 'e',
};

interface GitParse {
  /** Index in args of the sub-command, or -1. */
  sub: number;
  hazard?: string | undefined;
  /** `-c alias.NAME=VALUE` given on the command line. */
  aliases: Map<string, string>;
  dynamic: boolean;
  /** Values of other `-c NAME=VALUE` options (a pager, a hook path, a helper: maybe a command). */
  values?: string[];
  /** `--exec-path` or `--config-env`: programs or settings come from outside the command line. */
  opaque?: boolean;
}

function parseGit(args: readonly Word[]): GitParse {
  const aliases = new Map<string, string>();
  const values: string[] = [];
  let opaque = false;
  let hazard: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === null || a === undefined)
      return { sub: i, hazard: 'an option is not static', aliases, dynamic: true, values, opaque };
    if (!a.startsWith('-')) return { sub: i, hazard, aliases, dynamic: false, values, opaque };
    const name = a.split('=', 1)[0] ?? a;
    if (!GIT_SAFE_GLOBAL.has(a)) hazard ??= `the option ${name} can make git run other programs`;
    if (a === '-c') {
      const v = args[i + 1];
      if (v === null || v === undefined) return { sub: -1, hazard, aliases, dynamic: true, values };
      const m = /^alias\.([^=]+)=([\s\S]*)$/i.exec(v);
      if (m !== null) aliases.set(m[1] ?? '', m[2] ?? '');
      else values.push(v.slice(v.indexOf('=') + 1));
    }
    if (
      a === '--exec-path' ||
      a.startsWith('--exec-path=') ||
      a === '--config-env' ||
      a.startsWith('--config-env=')
    )
      opaque = true;
    if (GIT_GLOBAL_WITH_VALUE.has(a) || (a.startsWith('-c') && a.length === 2)) i++;
  }
  return { sub: -1, hazard, aliases, dynamic: false, values, opaque };
}

function longOptionHazard(arg: string, names: readonly string[]): string | undefined {
  if (!arg.startsWith('--') || arg.length <= 3) return undefined;
  const name = arg.split('=', 1)[0] ?? arg;
  // getopt-style parsers accept any unambiguous abbreviation (`--out=x` is `--output=x`).
  return names.find((n) => n === name || n.startsWith(name));
}

function gitHazard(args: readonly Word[]): string | undefined {
  const g = parseGit(args);
  if (g.hazard !== undefined) return g.hazard;
  if (g.sub < 0) return undefined;
  const sub = args[g.sub] as string;
  if (GIT_HAZARDOUS_COMMANDS.has(sub)) return `git ${sub} runs programs named by configuration or writes it`;
  if (!GIT_COMMANDS.has(sub))
    return `git ${sub} is not a git command: it may be an alias that runs a program`;
  const shorts = GIT_HAZARDOUS_SHORT[sub] ?? '';
  for (const a of args.slice(g.sub + 1)) {
    if (a === null) continue;
    if (a === '--') break;
    const long = longOptionHazard(a, GIT_HAZARDOUS_LONG);
    if (long !== undefined) return `git ${sub} ${long} runs a program or writes a file it names`;
    if (shorts !== '' && /^-[A-Za-z]/.test(a) && !a.startsWith('--')) {
      const cluster = a.slice(1);
      if ([...shorts].some((s) => cluster.includes(s))) return `git ${sub} ${a} runs a program`;
    }
  }
  return undefined;
}

function gitCommand(args: readonly Word[], out: Unwrapped, depth: number): void {
  const g = parseGit(args);
  if (g.dynamic) {
    out.unprovable.push('git: an option is not static, so the sub-command is unknown');
    return;
  }
  if (g.opaque === true)
    out.unprovable.push('git: --exec-path or --config-env takes programs from elsewhere');
  // A configuration value may be a command git runs (core.pager, core.fsmonitor, credential.helper …).
  for (const v of g.values ?? []) out.scripts.push(v);
  if (g.sub < 0) return;
  const rest = args.slice(g.sub);
  const sub = rest[0] as string;
  // `git config core.fsmonitor 'rm v'` stores a command a later git runs: its values are shell code.
  if (sub === 'config')
    for (const a of rest.slice(1)) if (a === null || !a.startsWith('-')) out.scripts.push(a);
  const alias = g.aliases.get(sub.toLowerCase());
  if (alias !== undefined) {
    if (alias.startsWith('!')) {
      out.scripts.push(joinWords([alias.slice(1), ...rest.slice(1)]));
    } else {
      // The alias expands to git's own words (naive split: quotes in aliases are rare; unknown ones are caught below).
      const words = alias.split(/\s+/).filter((w) => w !== '');
      const next = unwrap('git', [...words, ...rest.slice(1)], depth + 1);
      out.commands.push(...next.commands);
      out.scripts.push(...next.scripts);
      out.unprovable.push(...next.unprovable);
    }
    return;
  }
  // The same command without its global options, as a deny rule like `git push*` is written.
  if (g.sub > 0) out.commands.push(effective('git', rest));
  if (!GIT_COMMANDS.has(sub)) out.unprovable.push(`git ${sub} may be an alias from a configuration file`);
}

function shortCluster(arg: string): string | undefined {
  return /^-[A-Za-z0-9]+$/.test(arg) ? arg.slice(1) : undefined;
}

/** Every program programHazard() has a case for (keep in step: a unit test checks each one). */
export const HAZARD_PROGRAMS: ReadonlySet<string> = new Set(
  (
    'git find tar gtar bsdtar rsync ssh scp sftp awk gawk mawk nawk busybox-awk sed gsed less more most man ' +
    'vi vim nvim ex view vimdiff emacs zip fd fdfind rg gdb at batch crontab npm pnpm yarn bun'
  ).split(' '),
);

/** Programs that unwrap() looks into besides the wrapper table. */
const UNWRAPPED = new Set([
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

/**
 * Whether a command's arguments can change how it is keyed. For any other program the key is its name
 * whatever the arguments, so keying need not read them (speed).
 */
export function argumentsMatter(program: string): boolean {
  const name = baseName(program);
  return (
    EVALUATING_BUILTINS.has(program) ||
    program === 'printf' ||
    program === 'test' ||
    program === '[' ||
    SHELLS.has(name) ||
    UNWRAPPED.has(name) ||
    WRAPPERS[name] !== undefined ||
    HAZARD_PROGRAMS.has(name)
  );
}

/** Options of common programs that run other programs (or shell code) named in the option. */
export function programHazard(name: string, args: readonly Word[]): string | undefined {
  const dynamic = args.some((a) => a === null);
  switch (name) {
    case 'git':
      return gitHazard(args);
    case 'find':
      for (const a of args) {
        if (a !== null && /^-(exec|execdir|ok|okdir|delete|fprint|fprint0|fprintf|fls)$/.test(a))
          return `${a} runs a program, deletes or writes files`;
      }
      return dynamic ? 'an argument is not static' : undefined;
    case 'tar':
    case 'gtar':
    case 'bsdtar': {
      const long = [
        '--to-command',
        '--use-compress-program',
        '--checkpoint-action',
        '--info-script',
        '--new-volume-script',
        '--rsh-command',
        '--rmt-command',
        '--index-file',
      ];
      for (const [i, a] of args.entries()) {
        if (a === null) return 'an argument is not static';
        const hit = longOptionHazard(a, long);
        if (hit !== undefined) return `${hit} runs a program`;
        const cluster = shortCluster(a) ?? (i === 0 && /^[A-Za-z]+$/.test(a) ? a : undefined);
        if (cluster !== undefined && /[IF]/.test(cluster)) return `-I/-F run a program`;
      }
      return undefined;
    }
    case 'rsync':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        const hit = longOptionHazard(a, ['--rsh', '--rsync-path']);
        if (hit !== undefined) return `${hit} runs a program`;
        const cluster = shortCluster(a);
        if (cluster !== undefined && cluster.includes('e')) return '-e runs a program';
      }
      return undefined;
    case 'ssh':
    case 'scp':
    case 'sftp':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        const cluster = shortCluster(a);
        if (a.startsWith('-o') || a.startsWith('-F') || (cluster !== undefined && /[oFS]/.test(cluster)))
          return '-o/-F/-S can run a local program (ProxyCommand, LocalCommand)';
      }
      return undefined;
    case 'awk':
    case 'gawk':
    case 'mawk':
    case 'nawk':
    case 'busybox-awk':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (/^-(f|E|i|l)/.test(a) || /^--(file|exec|include|load)/.test(a))
          return 'the program text is read from a file';
        if (/system|\||>|getline/.test(a))
          return 'the program can run commands or write files (system, |, >)';
      }
      return undefined;
    case 'sed':
    case 'gsed':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (/^-(f|-file)/.test(a)) return 'the script is read from a file';
        // A script glued to its option (-e'1e cmd', --expression=…) is a script too.
        const glued = /^(?:-[A-Za-z]*e|--expression=)([\s\S]+)$/.exec(a)?.[1];
        if (sedRunsOrWrites(glued ?? a)) return 'the script can run commands or write files (e, w)';
      }
      return undefined;
    case 'less':
    case 'more':
    case 'most':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (a.startsWith('+') || /^-(k|-lesskey)/.test(a)) return 'a start-up command can run a shell';
      }
      return undefined;
    case 'man':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (/^-(P|H|-pager|-html)/.test(a) || (shortCluster(a)?.match(/[PH]/) ?? null) !== null)
          return 'the pager or browser option runs a program';
      }
      return undefined;
    case 'vi':
    case 'vim':
    case 'nvim':
    case 'ex':
    case 'view':
    case 'vimdiff':
    case 'emacs':
      return 'an editor runs commands from its options and files';
    case 'zip':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (a === '-TT' || longOptionHazard(a, ['--unzip-command']) !== undefined)
          return '-TT runs a program';
      }
      return undefined;
    case 'fd':
    case 'fdfind':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (/^-(x|X)/.test(a) || longOptionHazard(a, ['--exec', '--exec-batch']) !== undefined)
          return '-x/--exec runs a program';
      }
      return undefined;
    case 'npm':
    case 'pnpm':
    case 'yarn':
    case 'bun':
      // `exec`/`x`/`dlx` run a program or shell code named by the arguments, not the package manager.
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (/^(exec|x|dlx|-c|--call(=.*)?)$/.test(a)) return `${a} runs a program or shell code it is given`;
      }
      return undefined;
    case 'rg':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (longOptionHazard(a, ['--pre']) !== undefined) return '--pre runs a program on every file';
      }
      return undefined;
    case 'gdb':
      for (const a of args) {
        if (a === null) return 'an argument is not static';
        if (
          /^-(ex|x|iex|ix|batch)/.test(a) ||
          longOptionHazard(a, ['--eval-command', '--command']) !== undefined
        )
          return 'gdb runs commands from its options (shell …)';
      }
      return undefined;
    case 'at':
    case 'batch':
    case 'crontab':
      return `${name} schedules commands to run later`;
    default:
      return undefined;
  }
}

/** GNU sed's `e` command and `e`/`w` flags of `s`, and the `w`/`W`/`r`… file commands. */
function sedRunsOrWrites(script: string): boolean {
  if (script.startsWith('-')) return false;
  // A command letter at a command position: start, after ; { } newline, after an address.
  if (
    /(^|[;{}\n])\s*(\d+|\$|\/(?:[^/\\]|\\.)*\/)?(,(\d+|\$|\/(?:[^/\\]|\\.)*\/))?\s*!?\s*[ewWrRF]/.test(script)
  )
    return true;
  // s/…/…/FLAGS with e or w among the flags (any delimiter).
  return /s(.)(?:(?!\1)[^\\]|\\.)*\1(?:(?!\1)[^\\]|\\.)*\1[^;}\n]*[ew]/.test(script);
}

/** git sub-commands that only read: no hooks, editors, credential helpers, ssh or merge drivers. */
const GIT_READ_ONLY = new Set([
  'status',
  'log',
  'diff',
  'show',
  'blame',
  'annotate',
  'shortlog',
  'rev-parse',
  'rev-list',
  'ls-files',
  'ls-tree',
  'cat-file',
  'merge-base',
  'describe',
  'version',
  'grep',
  'show-ref',
  'for-each-ref',
  'name-rev',
  'count-objects',
  'check-ignore',
  'check-attr',
  'var',
  'whatchanged',
  'diff-tree',
  'diff-files',
  'diff-index',
  'range-diff',
  'cherry',
  'show-branch',
]);

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

/**
 * Variables that load code or choose what a program name means, or where a program finds the
 * configuration that names the programs it runs (git's `core.fsmonitor`, `core.pager`, aliases …).
 */
export const LOADS_CODE =
  /^(PATH|LD_PRELOAD|LD_AUDIT|LD_LIBRARY_PATH|BASH_ENV|ENV|BASH_LOADABLES_PATH|PROMPT_COMMAND|PS4|SHELLOPTS|BASHOPTS|HOME|XDG_CONFIG_HOME|GIT_CONFIG_PARAMETERS|GIT_CONFIG_GLOBAL|GIT_CONFIG_SYSTEM|GIT_CONFIG|GIT_DIR|GIT_EXEC_PATH|GIT_TEMPLATE_DIR)$/;

/** Package runners that run a program or shell code named in their arguments. */
const PACKAGE_RUNNERS = new Set(['npx', 'pnpx', 'bunx']);
const PACKAGE_MANAGERS = new Set(['npm', 'pnpm', 'yarn', 'bun']);

/** Interpreters whose options take program text inline (`python3 -c`, `perl -e`, `node -e`). */
const INTERPRETER =
  /^(expect|python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby|node|nodejs|deno|bun|php|lua[0-9.]*|luajit|tclsh|wish|osascript|pwsh|Rscript|julia)$/;

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
  if (LOOKED_INTO.has(name) || WRAPPERS[name] !== undefined) return undefined;
  return programHazard(name, args);
}

/**
 * Programs known not to execute their arguments: each reads, prints, compares or moves data, and none
 * has an option that runs a program or shell code (the reason is given for each). Any other program
 * capsule has no model of (not a wrapper, a shell, an interpreter or a program with hazard options
 * above) is assumed to run its arguments: a deny rule judges every command its words could be.
 * docs/permissions.md lists the table; a unit test keeps both in step.
 */
export const INERT_PROGRAMS: Readonly<Record<string, string>> = {
  echo: 'prints its arguments',
  printf: 'prints its arguments by a format (-v, which evaluates, is judged separately)',
  true: 'does nothing',
  false: 'does nothing',
  ':': 'does nothing',
  pwd: 'prints the working directory',
  cd: 'changes the working directory of the shell',
  cat: 'copies files to its output',
  tac: 'copies files to its output, last line first',
  head: 'prints the start of files',
  tail: 'prints the end of files (-f only waits)',
  wc: 'counts lines, words and bytes',
  uniq: 'filters repeated lines',
  cut: 'prints columns of lines',
  tr: 'translates characters',
  nl: 'numbers lines',
  fold: 'wraps lines',
  paste: 'joins lines of files',
  join: 'joins two files on a field',
  column: 'formats columns',
  rev: 'reverses lines',
  grep: 'searches files for a pattern (GNU grep has no option that runs a program)',
  egrep: 'grep -E',
  fgrep: 'grep -F',
  ls: 'lists files',
  stat: 'prints file status',
  file: 'names file types from magic numbers',
  basename: 'prints a name without its folder',
  dirname: 'prints the folder of a name',
  realpath: 'prints a resolved path',
  readlink: 'prints a symbolic link target',
  du: 'sums disk usage',
  df: 'prints free space',
  touch: 'sets file times or creates empty files',
  mkdir: 'creates folders',
  rmdir: 'removes empty folders',
  rm: 'removes files',
  unlink: 'removes one file',
  cp: 'copies files',
  mv: 'moves files',
  ln: 'links files',
  chmod: 'changes file modes',
  chown: 'changes file owners',
  chgrp: 'changes file groups',
  truncate: 'sets file sizes',
  mktemp: 'creates a temporary file',
  diff: 'compares files (GNU diff runs no program named in its arguments)',
  cmp: 'compares files byte by byte',
  comm: 'compares sorted files',
  date: 'prints or parses dates',
  sleep: 'waits',
  seq: 'prints numbers',
  yes: 'prints a line again and again',
  id: 'prints user and group ids',
  whoami: 'prints the user name',
  uname: 'prints system information',
  which: 'prints where a program is, without running it',
  type: 'prints what a name means, without running it',
  printenv: 'prints variables',
  expr: 'evaluates an expression (no shell arithmetic, no code)',
  base64: 'encodes or decodes data',
  md5sum: 'hashes files',
  sha1sum: 'hashes files',
  sha256sum: 'hashes files',
  sha512sum: 'hashes files',
  cksum: 'hashes files',
  od: 'dumps bytes',
  xxd: 'dumps bytes',
  strings: 'prints printable strings of files',
  tee: 'copies its input to files',
  jq: 'filters JSON (jq has no function that runs a program)',
  curl: 'transfers URLs (no option of curl runs a program)',
  tree: 'lists folders',
};

/** Programs with a model here: what they run is computed from their words, not assumed. */
function modelled(name: string): boolean {
  return (
    EVALUATING_BUILTINS.has(name) ||
    SHELLS.has(name) ||
    WRAPPERS[name] !== undefined ||
    UNWRAPPED.has(name) ||
    HAZARD_PROGRAMS.has(name) ||
    INTERPRETER.test(name) ||
    PACKAGE_RUNNERS.has(name) ||
    PACKAGE_MANAGERS.has(name) ||
    implicitRuns(name, ['x']) !== undefined ||
    name === 'test' ||
    name === '[' ||
    name === 'scp' ||
    name === 'sftp'
  );
}

/**
 * Is this a program capsule knows nothing about, so that its arguments may be a command it runs
 * (`setpriv rm v`, `perf stat rm v`, `sg root -c 'rm v'`, a project's own `./with-env rm v`)?
 */
export function mayRunArguments(name: string): boolean {
  return !Object.hasOwn(INERT_PROGRAMS, name) && !modelled(name);
}

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
