/**
 * git: its global options, its own sub-commands (anything else may be an alias), and the options and
 * sub-commands that run programs named by configuration or arguments.
 */
import { effective, joinWords, type Unwrapped, type Word } from './words.js';
import { longOptionHazard } from './options.js';

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

export function parseGit(args: readonly Word[]): GitParse {
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

export function gitHazard(args: readonly Word[]): string | undefined {
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

/**
 * What `git ARGS` makes run, into `out`. An alias that expands to git's own words is unwrapped again by
 * `expand` (unwrap() itself, one level deeper: passed in so this module does not import it back).
 */
export function gitCommand(
  args: readonly Word[],
  out: Unwrapped,
  expand: (gitArgs: readonly Word[]) => Unwrapped,
): void {
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
      const next = expand([...words, ...rest.slice(1)]);
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

/** git sub-commands that only read: no hooks, editors, credential helpers, ssh or merge drivers. */
export const GIT_READ_ONLY = new Set([
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
