/**
 * Wrappers: programs that run the command given after their own options (`nice`, `sudo`, `timeout` …),
 * and where in their words that command starts.
 */
import type { Word } from './words.js';
import { optionWidth } from './options.js';

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

const WRAPPERS: Readonly<Record<string, WrapperSpec>> = {
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
 * The wrapper spec of a program, if it is one. An own key only: a program named `constructor` or
 * `toString` is not a wrapper, whatever the object's prototype holds.
 */
export function wrapperSpec(name: string): WrapperSpec | undefined {
  return Object.hasOwn(WRAPPERS, name) ? WRAPPERS[name] : undefined;
}

/** Where the wrapped command starts in `args`, or -1 (none), or null (cannot tell). */
export function commandStart(args: readonly Word[], spec: WrapperSpec): number | null {
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

export const SSH_WITH_VALUE = [
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
