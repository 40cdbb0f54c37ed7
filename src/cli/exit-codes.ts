import type { ErrorCode } from '../base/errors.js';
import { exitStatus } from '../runners/exit-status.js';
import type { RunResult } from '../runners/types.js';

/**
 * capsule's own exit codes (sysexits-style, so they rarely collide with a capability's own), one meaning
 * each across every command. `capsule run` otherwise exits with the capability's exit code.
 */
export const EXIT = {
  OK: 0,
  /** What was run or checked failed: a capability run, a check, a verification, a comparison. */
  FAILURE: 1,
  USAGE: 64,
  /** Bad data: invalid input document or manifest. */
  DATA: 65,
  NOT_FOUND: 66,
  /** A runner, engine or requested environment is unavailable (e.g. no Docker engine). */
  UNAVAILABLE: 69,
  INTERNAL: 70,
  /** What would be created exists already (a capability NAME, a report file without --force). */
  EXISTS: 73,
  /** Another capsule process held a lock for too long; running again may succeed. */
  LOCK_TIMEOUT: 75,
  /** Permission denied by the gate (EX_NOPERM). */
  DENIED: 77,
  /** capsule.json, a profile, the audit log or capsule's trusted state is invalid or broken. */
  CONFIG: 78,
  /** The run hit its wall-clock limit (like timeout(1)). */
  TIMEOUT: 124,
  /** The run was canceled (SIGINT). */
  CANCELED: 130,
  /** The run passed limits.outputBytes, memoryMb or pids and was stopped (128 + SIGKILL, in every runner). */
  LIMIT_KILLED: 137,
} as const;

/** One row of the exit-code table: docs/cli.md prints the same rows, every command's --help a subset. */
export interface ExitCodeRow {
  /** The code, or `128+n` for a run killed by signal n. */
  code: number | '128+n';
  meaning: string;
}

/** The one table of capsule's exit codes (a test holds docs/cli.md and every command to it). */
export const EXIT_CODES: readonly ExitCodeRow[] = [
  { code: EXIT.OK, meaning: 'success' },
  {
    code: EXIT.FAILURE,
    meaning:
      'what ran or was checked failed: the capability (its own code 1, or output that breaks its outputSchema), a check, a verification or a comparison',
  },
  {
    code: EXIT.USAGE,
    meaning: 'usage error: unknown command or flag, bad flag value, a --grant that can never match',
  },
  {
    code: EXIT.DATA,
    meaning: 'invalid data: an input that is not JSON or fails the input schema, an invalid manifest',
  },
  { code: EXIT.NOT_FOUND, meaning: 'not found: no such capability or file' },
  {
    code: EXIT.UNAVAILABLE,
    meaning:
      'unavailable: the runner or engine for an environment (e.g. no Docker engine), or a requested environment the capability cannot run in',
  },
  { code: EXIT.INTERNAL, meaning: 'internal error: a bug in capsule (CAPSULE_DEBUG=1 prints the stack)' },
  {
    code: EXIT.EXISTS,
    meaning: 'already exists: a capability NAME that is taken, a report file without --force',
  },
  {
    code: EXIT.LOCK_TIMEOUT,
    meaning: 'lock timeout: another capsule process held capsule.json or the audit log; run again',
  },
  {
    code: EXIT.DENIED,
    meaning: 'permission denied: the message names the key and the flag or capsule.json entry that allows it',
  },
  {
    code: EXIT.CONFIG,
    meaning:
      "setup broken: capsule.json or a profile is invalid, the audit log is broken, capsule's confirmed policy or per-user key is not trusted",
  },
  {
    code: EXIT.TIMEOUT,
    meaning: 'the run hit its time limit (limits.timeoutMs, --timeout-ms) and was killed',
  },
  {
    code: EXIT.CANCELED,
    meaning: 'canceled: Ctrl-C or SIGTERM of capsule, or a canceled call',
  },
  {
    code: EXIT.LIMIT_KILLED,
    meaning: 'the run passed limits.outputBytes, memoryMb or pids and was stopped',
  },
  { code: '128+n', meaning: 'the run was killed by signal n' },
];

/** A code a command lists in its help, with what it means there when that says more than the table. */
export type CommandExitCode = ExitCodeRow['code'] | readonly [ExitCodeRow['code'], string];

const order = (code: string): number => EXIT_CODES.findIndex((r) => String(r.code) === code);

/** The "Exit codes:" section of a command's --help, from the one table; `wrap` fits a line to the width. */
export function exitCodesHelp(
  codes: readonly CommandExitCode[],
  wrap: (text: string, width: number) => string,
  width: number,
): string {
  const rows = codes.map((c) => {
    const [code, note] = Array.isArray(c) ? (c as readonly [ExitCodeRow['code'], string]) : [c, undefined];
    const row = EXIT_CODES.find((r) => r.code === code);
    if (row === undefined) throw new Error(`exit code ${String(code)} is not in the exit-code table`);
    return { code: String(code), text: note === undefined ? row.meaning : `${note}` };
  });
  rows.sort((a, b) => order(a.code) - order(b.code));
  const pad = Math.max(...rows.map((r) => r.code.length)) + 2;
  const indent = 2 + pad;
  const lines = rows.map((r) => {
    const wrapped = wrap(r.text, Math.max(1, width - indent)).split('\n');
    return [
      `  ${r.code.padEnd(pad)}${wrapped[0] ?? ''}`,
      ...wrapped.slice(1).map((l) => `${' '.repeat(indent)}${l}`),
    ].join('\n');
  });
  return `\nExit codes:\n${lines.join('\n')}\n`;
}

/** The exit code of each error code: one row each, so a new code has to choose its exit code. */
const EXIT_FOR_ERROR: Record<ErrorCode, number> = {
  USAGE: EXIT.USAGE,
  INPUT_INVALID: EXIT.DATA,
  MANIFEST_INVALID: EXIT.DATA,
  PATH_ESCAPE: EXIT.DATA,
  NOT_FOUND: EXIT.NOT_FOUND,
  RUNNER_UNAVAILABLE: EXIT.UNAVAILABLE,
  PERMISSION_DENIED: EXIT.DENIED,
  CEILING_VIOLATION: EXIT.DENIED,
  CONFIG_INVALID: EXIT.CONFIG,
  PROFILE_INVALID: EXIT.CONFIG,
  CANCELED: EXIT.CANCELED,
  ALREADY_EXISTS: EXIT.EXISTS,
  LOCK_TIMEOUT: EXIT.LOCK_TIMEOUT,
  AUDIT_BROKEN: EXIT.CONFIG,
  UNSUPPORTED: EXIT.UNAVAILABLE,
  RUNNER_FAILED: EXIT.FAILURE,
};

export function exitCodeFor(code: ErrorCode): number {
  // A code from outside the type (an error object built elsewhere) is a plain failure.
  return (EXIT_FOR_ERROR as Partial<Record<string, number>>)[code] ?? EXIT.FAILURE;
}

/** The fields of a finished run (a capability's or a command's) that decide capsule's exit code. */
export type RunEnd = Pick<RunResult, 'exitCode' | 'signal' | 'timedOut' | 'canceled' | 'truncated'> &
  Partial<Pick<RunResult, 'oomKilled' | 'pidsLimited' | 'outputInvalid'>>;

/**
 * capsule's exit code for a finished run: the process's own, or the limit that ended it. A limit is
 * judged by its result field, not by how the runner stopped the run (a Wasm guest at its memory cap traps
 * with 134, a shell process on timeout dies of SIGTERM), so one limit gives one code in every runner.
 */
export function runExitCode(result: RunEnd): number {
  if (result.timedOut) return EXIT.TIMEOUT;
  if (result.canceled) return EXIT.CANCELED;
  if (result.truncated || result.oomKilled === true || result.pidsLimited === true) return EXIT.LIMIT_KILLED;
  // The capability exited 0 but its output broke its outputSchema: a failed run.
  if (result.outputInvalid !== undefined && result.exitCode === 0) return EXIT.FAILURE;
  return exitStatus(result.exitCode, result.signal, EXIT.FAILURE);
}

const RUN_END: readonly CommandExitCode[] = [EXIT.TIMEOUT, EXIT.CANCELED, EXIT.LIMIT_KILLED, '128+n'];
const GATE: readonly CommandExitCode[] = [EXIT.USAGE, EXIT.NOT_FOUND, EXIT.DENIED, EXIT.CONFIG];

/**
 * The codes each command's --help lists (by its path: `grants revoke`), from the table above; a command
 * adds its line here. A note says what the code means for that command when it says more.
 */
export const COMMAND_EXIT_CODES: Readonly<Record<string, readonly CommandExitCode[]>> = {
  list: [EXIT.OK, EXIT.CONFIG],
  show: [EXIT.OK, EXIT.USAGE, EXIT.DATA, EXIT.NOT_FOUND, EXIT.CONFIG],
  validate: [
    EXIT.OK,
    [EXIT.FAILURE, 'a manifest is invalid (each problem as file: field: reason)'],
    EXIT.NOT_FOUND,
    EXIT.CONFIG,
  ],
  new: [
    EXIT.OK,
    EXIT.USAGE,
    EXIT.DATA,
    EXIT.NOT_FOUND,
    [EXIT.EXISTS, 'NAME is taken'],
    EXIT.CONFIG,
    EXIT.CANCELED,
  ],
  run: [
    [EXIT.OK, 'the capability exited 0; any other code it exits with is passed through'],
    [EXIT.FAILURE, 'the capability failed (its own 1, or output that breaks its outputSchema)'],
    EXIT.DATA,
    EXIT.UNAVAILABLE,
    ...GATE,
    ...RUN_END,
  ],
  exec: [
    [EXIT.OK, 'the command exited 0; any other code it exits with is passed through'],
    ...GATE,
    ...RUN_END,
  ],
  key: [EXIT.OK, EXIT.USAGE],
  explain: [EXIT.OK, EXIT.USAGE, EXIT.NOT_FOUND, EXIT.CONFIG],
  'grants list': [EXIT.OK, EXIT.CONFIG],
  'grants revoke': [EXIT.OK, EXIT.USAGE, EXIT.NOT_FOUND, EXIT.LOCK_TIMEOUT, EXIT.CONFIG],
  reload: [
    EXIT.OK,
    [EXIT.DENIED, 'no person confirmed the difference (no terminal, --no-prompt, or no)'],
    EXIT.LOCK_TIMEOUT,
    EXIT.CONFIG,
  ],
  'rules check': [
    EXIT.OK,
    [EXIT.FAILURE, 'a counterexample was found'],
    EXIT.USAGE,
    EXIT.NOT_FOUND,
    EXIT.CONFIG,
  ],
  'rules import': [
    [EXIT.OK, 'shown (no --write), written, or nothing to write'],
    [EXIT.USAGE, 'no --claude-settings, or the file is not a settings.json with a permissions block'],
    [EXIT.NOT_FOUND, 'the file cannot be read'],
    [EXIT.LOCK_TIMEOUT, 'another capsule process held capsule.json'],
    [EXIT.DENIED, '--write but no yes (a no, --no-prompt, or no terminal): nothing written'],
    EXIT.CONFIG,
  ],
  'hook claude': [
    [
      EXIT.OK,
      'an answer was given (or none, for no decision), also a denial; --install/--uninstall: written',
    ],
    EXIT.USAGE,
    [EXIT.NOT_FOUND, '--uninstall: the settings file holds no hook of capsule’s'],
    [EXIT.DENIED, '--install/--uninstall: no yes (a no, or no terminal and no --yes): nothing written'],
    [EXIT.CONFIG, '--install/--uninstall: the settings file is not valid JSON settings'],
  ],
  'audit verify': [
    EXIT.OK,
    [EXIT.FAILURE, 'the log is broken (the first problem is named)'],
    EXIT.NOT_FOUND,
    EXIT.CONFIG,
  ],
  'audit reset': [EXIT.OK, EXIT.LOCK_TIMEOUT, EXIT.CONFIG],
  compare: [
    EXIT.OK,
    [EXIT.FAILURE, 'the outputs differ'],
    EXIT.DATA,
    [
      EXIT.UNAVAILABLE,
      'a requested environment could not run (no engine, an engine that failed, or not portable to it)',
    ],
    [EXIT.EXISTS, 'the --html file exists (add --force)'],
    ...GATE,
    EXIT.CANCELED,
  ],
  ci: [
    EXIT.OK,
    [EXIT.FAILURE, 'a case failed'],
    [EXIT.EXISTS, 'the --junit file exists (add --force)'],
    EXIT.USAGE,
    EXIT.NOT_FOUND,
    [EXIT.DENIED, 'every failed case was denied (the summary names the keys to grant)'],
    EXIT.CONFIG,
  ],
  'wasm run': [
    [EXIT.OK, 'the module exited 0; any other code it exits with is passed through'],
    EXIT.USAGE,
    EXIT.NOT_FOUND,
    EXIT.TIMEOUT,
    EXIT.CANCELED,
  ],
  'images list': [EXIT.OK, EXIT.UNAVAILABLE],
  'images build': [EXIT.OK, EXIT.UNAVAILABLE, EXIT.NOT_FOUND],
  engines: [EXIT.OK, [EXIT.UNAVAILABLE, 'an engine does not answer'], EXIT.USAGE, EXIT.CONFIG],
  mcp: [EXIT.OK, EXIT.USAGE, EXIT.CONFIG],
  learn: [
    [EXIT.OK, 'proved (and, with --write, written after a yes)'],
    [EXIT.FAILURE, 'the proof failed: nothing written'],
    [EXIT.USAGE, 'usage error (a flag; no cases.json and no --input)'],
    EXIT.DATA,
    EXIT.NOT_FOUND,
    [EXIT.UNAVAILABLE, 'no Docker engine for --promote docker, or the capability cannot be promoted there'],
    [EXIT.EXISTS, 'the promoted NAME-ENV exists already: nothing written'],
    [
      EXIT.DENIED,
      'a run was denied, or --write was not confirmed (a no, --no-prompt, no terminal): nothing written',
    ],
    EXIT.CONFIG,
    [EXIT.CANCELED, 'canceled (Ctrl-C, SIGTERM): nothing written'],
  ],
};
