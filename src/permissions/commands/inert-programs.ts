/**
 * Programs known not to execute their arguments; every other program capsule has no model of may.
 */
import { EVALUATING_BUILTINS, INTERPRETER, SHELLS } from './shells.js';
import { wrapperSpec } from './wrappers.js';
import { UNWRAPPED } from './unwrap.js';
import { HAZARD_PROGRAMS } from './hazards.js';
import { PACKAGE_MANAGERS, PACKAGE_RUNNERS, implicitRuns } from './hidden-runs.js';

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
    wrapperSpec(name) !== undefined ||
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
