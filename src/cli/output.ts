import { CapsuleError, type Denial } from '../base/errors.js';
import { DENIED_BY_TEXT } from '../permissions/denial.js';
import { shellWord } from '../base/shell-quote.js';
import { EXIT, exitCodeFor } from './exit-codes.js';

/**
 * Where a command hears SIGINT / SIGTERM: `process` in the binary, an EventEmitter in a test. A command
 * listens with `on` until it is done, never `once`: a library's exit hook (signal-exit's, which execa installs) re-raises a
 * signal that no other listener holds any more, which would kill the command before it reports the cancel.
 */
export interface SignalSource {
  on(signal: 'SIGINT' | 'SIGTERM', listener: () => void): unknown;
  removeListener(signal: 'SIGINT' | 'SIGTERM', listener: () => void): unknown;
}

/** A command's cancel: `signal` aborts on the first of the signals listened for, until `detach()`. */
export interface SignalCancel {
  signal: AbortSignal;
  detach(): void;
}

/** Listens (with `on`, see SignalSource) for `names` until `detach()`; any of them aborts `signal`. */
export function cancelOnSignals(
  signals: SignalSource,
  names: ReadonlyArray<'SIGINT' | 'SIGTERM'>,
): SignalCancel {
  const abort = new AbortController();
  const onSignal = (): void => abort.abort();
  for (const name of names) signals.on(name, onSignal);
  return {
    signal: abort.signal,
    detach() {
      for (const name of names) signals.removeListener(name, onSignal);
    },
  };
}

/** What a command reads from the terminal: a stream, and whether it is a TTY. */
export type CliInput = NodeJS.ReadableStream & { isTTY?: boolean | undefined };

/**
 * Every piece of the outside world a command touches, injected (src/cli/main.ts builds it from the
 * process; tests build their own), so each command runs in-process the same way.
 */
export interface CliIO {
  /**
   * Standard input, built on first use: creating process.stdin costs start-up time that a command
   * which never reads it should not pay.
   */
  stdin: () => CliInput;
  /** SIGINT / SIGTERM: a command that runs something stops it on these. */
  signals: SignalSource;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Whether stdin is an interactive terminal (prompts are possible). */
  interactive: boolean;
  /** Set by the command that ran; the process exits with it. */
  exitCode: number;
}

/**
 * Progress for a person waiting on something slow (a component build, an image build, an engine's first
 * measurement, learn, compare): `capsule COMMAND: …` lines on stderr when it is a terminal; nothing without
 * one or under --json, where stderr is a log and stdout a document. The one home of progress lines.
 */
export function progressLine(
  io: Pick<CliIO, 'stderr'>,
  command: string,
  options: { json?: boolean | undefined } = {},
): (message: string) => void {
  const tty = (io.stderr as { isTTY?: boolean }).isTTY === true;
  if (!tty || options.json === true) return () => undefined;
  return (message) => void write(io.stderr, `capsule ${command}: ${message}\n`);
}

/** Wrap a command action that returns its exit code (commander actions return void). */
export function action<A extends unknown[]>(
  io: CliIO,
  fn: (...args: A) => Promise<number>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    io.exitCode = await fn(...args);
  };
}

export function write(stream: NodeJS.WritableStream, text: string): Promise<void> {
  if (text === '') return Promise.resolve();
  return new Promise((resolve) => {
    stream.write(text, () => resolve());
  });
}

export function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

/** Error thrown by command actions to end with a given code after printing nothing more. */
export class CliExit extends Error {
  constructor(readonly exitCode: number) {
    super(`exit ${exitCode}`);
  }
}

/** Render an error for a person (or as JSON with --json); returns the exit code. */
const debugging = (io: CliIO): boolean => io.env.CAPSULE_DEBUG !== undefined && io.env.CAPSULE_DEBUG !== '';

/** `caused by:` lines for every `cause` under an error (CAPSULE_DEBUG=1): what a wrap site hid. */
function causeChain(err: Error): string {
  let out = '';
  const seen = new Set<unknown>([err]);
  for (let at: unknown = err.cause; at !== undefined && !seen.has(at) && seen.size < 10;) {
    seen.add(at);
    const code = (at as { code?: unknown }).code;
    const text = at instanceof Error ? at.message : String(at);
    out += `caused by: ${typeof code === 'string' ? `${code}: ` : ''}${text}\n`;
    at = at instanceof Error ? at.cause : undefined;
  }
  return out;
}

/** How the command line was given, for a denial's "allow it" line; `verbose`: the whole reason too. */
export interface ReportContext {
  argv?: readonly string[] | undefined;
  verbose?: boolean | undefined;
}

/** The command line again with `--grant KEY` added (before a `--`), quoted for a POSIX shell. */
export function withGrant(argv: readonly string[], key: string): string {
  const end = argv.indexOf('--');
  const at = end === -1 ? argv.length : end;
  const words = [...argv.slice(0, at), '--grant', key, ...argv.slice(at)];
  return ['capsule', ...words.map(shellWord)].join(' ');
}

/** What stopped the call, in a few words after "denied KEY (by …)". */
function denialReason(d: Denial): string {
  switch (d.source) {
    case 'unproven':
      return `capsule cannot prove it stays clear of the deny rule ${d.matched ?? ''}`.trimEnd();
    case 'deny-rule':
    case 'allowlist-deny':
      return `matched ${d.matched ?? 'a deny rule'}`;
    case 'self-protection':
      return "it touches capsule's own state";
    case 'mode':
      return d.what.split(/(?<=\.) /)[0] ?? d.what;
    case 'prompt':
    case 'session-deny':
      return 'refused at the prompt';
    default:
      return d.by === 'ceiling'
        ? 'not sandboxed, so capsule.json cannot allow it (--no-prompt, or no terminal)'
        : 'it needs approval (--no-prompt, or no terminal)';
  }
}

/** The one line that says exactly how to allow the call (a command to paste where a grant does it). */
function allowLine(d: Denial, argv: readonly string[] | undefined): string {
  switch (d.source) {
    case 'unproven':
      return 'allow it: only a person can, once: run it in a terminal without --no-prompt (a grant does not lift it)';
    case 'deny-rule':
    case 'allowlist-deny':
      return `allow it: remove or narrow ${d.matched ?? 'the deny rule'} where it is set (capsule explain names the file)`;
    case 'self-protection':
      return "allow it: not possible; capsule's own state is off limits to every call";
    case 'mode':
      return 'allow it: run with --mode default (or leave plan mode)';
    default:
      return argv === undefined
        ? `allow it: add --grant ${shellWord(d.key)}`
        : `allow it: ${withGrant(argv, d.key)}`;
  }
}

/** A denial in two lines: what was denied and by whom, then how to allow it; the rest under --verbose. */
export function denialLines(err: CapsuleError, d: Denial, context: ReportContext = {}): string {
  const by = d.by === 'nobody' ? 'nobody could be asked' : DENIED_BY_TEXT[d.by];
  let text = `capsule: denied ${d.key} (by ${by}): ${denialReason(d)}\n${allowLine(d, context.argv)}\n`;
  if (context.verbose === true) text += `${err.message}\n`;
  return text;
}

export async function reportError(
  io: CliIO,
  err: unknown,
  asJson: boolean,
  context: ReportContext = {},
): Promise<number> {
  if (err instanceof CliExit) return err.exitCode;
  if (err instanceof CapsuleError) {
    const exitCode = exitCodeFor(err.code);
    if (asJson) {
      await write(io.stdout, json({ error: { code: err.code, message: err.message, ...err.details } }));
      return exitCode;
    }
    if (err.code === 'PERMISSION_DENIED' && err.details.denial !== undefined) {
      await write(io.stderr, denialLines(err, err.details.denial, context));
      return exitCode;
    }
    let text = `capsule: ${err.message}\n`;
    for (const issue of err.details.issues?.slice(1, 20) ?? []) {
      text += `  ${issue.file ? `${issue.file}: ` : ''}${issue.field ? `${issue.field}: ` : ''}${issue.message}\n`;
    }
    if (err.details.hint) text += `hint: ${err.details.hint}\n`;
    if (debugging(io)) text += causeChain(err);
    await write(io.stderr, text);
    return exitCode;
  }
  const message = err instanceof Error ? err.message : String(err);
  const stack = debugging(io) && err instanceof Error ? `\n${err.stack}${causeChain(err)}` : '';
  await write(
    io.stderr,
    `capsule: internal error: ${message}${stack}\nThis is a bug in capsule; set CAPSULE_DEBUG=1 for details and report it.\n`,
  );
  return EXIT.INTERNAL;
}
