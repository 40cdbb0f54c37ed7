/**
 * The per-program hazard table: options of common programs that run other programs or shell code
 * named in the option (`tar --to-command`, `rsync -e`, `sed 1e`).
 */
import type { Word } from './words.js';
import { gitHazard } from './git.js';
import { longOptionHazard, shortCluster } from './options.js';

/** How one program's words are judged: the reason they may run another program, or undefined. */
type HazardCheck = (args: readonly Word[], name: string) => string | undefined;

/**
 * Each argument in turn, judged by `hazard`; an argument that is not static may be any of them. The
 * first hazard found is the answer.
 */
function eachArgument(hazard: (arg: string, index: number) => string | undefined): HazardCheck {
  return (args) => {
    for (const [i, a] of args.entries()) {
      if (a === null) return 'an argument is not static';
      const found = hazard(a, i);
      if (found !== undefined) return found;
    }
    return undefined;
  };
}

const find: HazardCheck = (args) => {
  for (const a of args) {
    if (a !== null && /^-(exec|execdir|ok|okdir|delete|fprint|fprint0|fprintf|fls)$/.test(a))
      return `${a} runs a program, deletes or writes files`;
  }
  return args.some((a) => a === null) ? 'an argument is not static' : undefined;
};

const TAR_LONG = [
  '--to-command',
  '--use-compress-program',
  '--checkpoint-action',
  '--info-script',
  '--new-volume-script',
  '--rsh-command',
  '--rmt-command',
  '--index-file',
];

const tar = eachArgument((a, i) => {
  const hit = longOptionHazard(a, TAR_LONG);
  if (hit !== undefined) return `${hit} runs a program`;
  const cluster = shortCluster(a) ?? (i === 0 && /^[A-Za-z]+$/.test(a) ? a : undefined);
  return cluster !== undefined && /[IF]/.test(cluster) ? `-I/-F run a program` : undefined;
});

const rsync = eachArgument((a) => {
  const hit = longOptionHazard(a, ['--rsh', '--rsync-path']);
  if (hit !== undefined) return `${hit} runs a program`;
  return shortCluster(a)?.includes('e') === true ? '-e runs a program' : undefined;
});

const ssh = eachArgument((a) => {
  const cluster = shortCluster(a);
  return a.startsWith('-o') || a.startsWith('-F') || (cluster !== undefined && /[oFS]/.test(cluster))
    ? '-o/-F/-S can run a local program (ProxyCommand, LocalCommand)'
    : undefined;
});

const awk = eachArgument((a) => {
  if (/^-(f|E|i|l)/.test(a) || /^--(file|exec|include|load)/.test(a))
    return 'the program text is read from a file';
  if (/system|\||>|getline/.test(a)) return 'the program can run commands or write files (system, |, >)';
  return undefined;
});

const sed = eachArgument((a) => {
  if (/^-(f|-file)/.test(a)) return 'the script is read from a file';
  // A script glued to its option (-e'1e cmd', --expression=…) is a script too.
  const glued = /^(?:-[A-Za-z]*e|--expression=)([\s\S]+)$/.exec(a)?.[1];
  return sedRunsOrWrites(glued ?? a) ? 'the script can run commands or write files (e, w)' : undefined;
});

const pager = eachArgument((a) =>
  a.startsWith('+') || /^-(k|-lesskey)/.test(a) ? 'a start-up command can run a shell' : undefined,
);

const man = eachArgument((a) =>
  /^-(P|H|-pager|-html)/.test(a) || (shortCluster(a)?.match(/[PH]/) ?? null) !== null
    ? 'the pager or browser option runs a program'
    : undefined,
);

const editor: HazardCheck = () => 'an editor runs commands from its options and files';

const zip = eachArgument((a) =>
  a === '-TT' || longOptionHazard(a, ['--unzip-command']) !== undefined ? '-TT runs a program' : undefined,
);

const fd = eachArgument((a) =>
  /^-(x|X)/.test(a) || longOptionHazard(a, ['--exec', '--exec-batch']) !== undefined
    ? '-x/--exec runs a program'
    : undefined,
);

// `exec`/`x`/`dlx` run a program or shell code named by the arguments, not the package manager.
const packageManager = eachArgument((a) =>
  /^(exec|x|dlx|-c|--call(=.*)?)$/.test(a) ? `${a} runs a program or shell code it is given` : undefined,
);

const rg = eachArgument((a) =>
  longOptionHazard(a, ['--pre']) !== undefined ? '--pre runs a program on every file' : undefined,
);

const gdb = eachArgument((a) =>
  /^-(ex|x|iex|ix|batch)/.test(a) || longOptionHazard(a, ['--eval-command', '--command']) !== undefined
    ? 'gdb runs commands from its options (shell …)'
    : undefined,
);

const scheduler: HazardCheck = (_args, name) => `${name} schedules commands to run later`;

/** The table, by program name (a Map: a name like `constructor` is not a key of an object's prototype). */
const HAZARDS: ReadonlyMap<string, HazardCheck> = new Map<string, HazardCheck>([
  ['git', (args) => gitHazard(args)],
  ['find', find],
  ...['tar', 'gtar', 'bsdtar'].map((n): [string, HazardCheck] => [n, tar]),
  ['rsync', rsync],
  ...['ssh', 'scp', 'sftp'].map((n): [string, HazardCheck] => [n, ssh]),
  ...['awk', 'gawk', 'mawk', 'nawk', 'busybox-awk'].map((n): [string, HazardCheck] => [n, awk]),
  ...['sed', 'gsed'].map((n): [string, HazardCheck] => [n, sed]),
  ...['less', 'more', 'most'].map((n): [string, HazardCheck] => [n, pager]),
  ['man', man],
  ...['vi', 'vim', 'nvim', 'ex', 'view', 'vimdiff', 'emacs'].map((n): [string, HazardCheck] => [n, editor]),
  ['zip', zip],
  ...['fd', 'fdfind'].map((n): [string, HazardCheck] => [n, fd]),
  ['rg', rg],
  ['gdb', gdb],
  ...['at', 'batch', 'crontab'].map((n): [string, HazardCheck] => [n, scheduler]),
  ...['npm', 'pnpm', 'yarn', 'bun'].map((n): [string, HazardCheck] => [n, packageManager]),
]);

/** Every program programHazard() has a check for. */
export const HAZARD_PROGRAMS: ReadonlySet<string> = new Set(HAZARDS.keys());

/** Options of common programs that run other programs (or shell code) named in the option. */
export function programHazard(name: string, args: readonly Word[]): string | undefined {
  return HAZARDS.get(name)?.(args, name);
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
