import { Command, CommanderError } from 'commander';
import { registerAudit } from './commands/audit.js';
import { registerCi } from './commands/ci.js';
import { registerCompare } from './commands/compare.js';
import { registerEngines } from './commands/engines.js';
import { registerExec } from './commands/exec.js';
import { registerExplain } from './commands/explain.js';
import { registerGrants } from './commands/grants.js';
import { registerHook } from './commands/hook.js';
import { registerImages } from './commands/images.js';
import { registerKey } from './commands/key.js';
import { registerLearn } from './commands/learn.js';
import { registerList } from './commands/list.js';
import { registerMcp } from './commands/mcp.js';
import { registerNew } from './commands/new.js';
import { registerReload } from './commands/reload.js';
import { registerRules } from './commands/rules.js';
import { registerRun } from './commands/run.js';
import { registerShow } from './commands/show.js';
import { registerValidate } from './commands/validate.js';
import { registerWasmRun } from './commands/wasm-run.js';
import { CapsuleError } from '../base/errors.js';
import { EXIT } from './exit-codes.js';
import { addExitCodeHelp, helpSettings, helpWidth } from './help.js';
import { reportError, write, type CliIO } from './output.js';
import { VERSION } from './version.js';

export interface ProgramOptions {
  /** Usage errors are reported as JSON by the caller (`--json`): commander's own text is held back. */
  jsonErrors?: boolean;
}

/** Build the command tree. Each command lives in its own file under commands/. */
export function buildProgram(io: CliIO, options: ProgramOptions = {}): Command {
  const program = new Command();
  const width = helpWidth(io.env, io.stdout);
  program
    .name('capsule')
    .description(
      'Sandboxed capability executor for self-authoring AI agents.\n' +
        'Capabilities live in capabilities/<name>/capability.json; the project root is the nearest folder holding capsule.json.',
    )
    .version(VERSION)
    .option('--verbose', 'print a denial or an error in full (with --json, everything is there already)')
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({
      writeOut: (s) => void write(io.stdout, s),
      writeErr: (s) => (options.jsonErrors === true ? undefined : void write(io.stderr, s)),
    })
    .configureHelp(helpSettings(width))
    .exitOverride();
  registerList(program, io);
  registerShow(program, io);
  registerValidate(program, io);
  registerNew(program, io);
  registerRun(program, io);
  registerMcp(program, io);
  registerCi(program, io);
  registerCompare(program, io);
  registerLearn(program, io);
  registerImages(program, io);
  registerEngines(program, io);
  registerExec(program, io);
  registerKey(program, io);
  registerExplain(program, io);
  registerGrants(program, io);
  registerReload(program, io);
  registerAudit(program, io);
  registerHook(program, io);
  registerRules(program, io);
  registerWasmRun(program, io);
  for (const command of program.commands) command.exitOverride();
  addExitCodeHelp(program, width);
  return program;
}

/** Run the CLI; returns the exit code instead of exiting, so tests can call it in-process. */
export async function runCli(argv: readonly string[], io: CliIO): Promise<number> {
  const wantsJson = jsonRequested(argv);
  const program = buildProgram(io, { jsonErrors: wantsJson });
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return io.exitCode;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end here with code 0; usage mistakes with EX_USAGE.
      if (err.exitCode === 0) return EXIT.OK;
      if (!wantsJson) return EXIT.USAGE;
      return reportError(io, usageError(err), true);
    }
    const end = argv.indexOf('--');
    const verbose = (end === -1 ? argv : argv.slice(0, end)).includes('--verbose');
    return reportError(io, err, wantsJson, { argv, verbose });
  }
}

/** `--json` before any `--` (after it, the words are a command's, e.g. `capsule exec -- jq --json`). */
function jsonRequested(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--json');
}

/** commander's usage error as capsule's, for the JSON error document. */
function usageError(err: CommanderError): CapsuleError {
  // A command group run without its subcommand ends in commander's help, not a message.
  if (err.code === 'commander.help' || err.message === '(outputHelp)') {
    return new CapsuleError(
      'USAGE',
      'a subcommand is required',
      { hint: 'add --help for usage' },
      { cause: err },
    );
  }
  // commander appends its suggestion on a line of its own: "(Did you mean list?)".
  const [message = '', ...rest] = err.message.replace(/^error: /, '').split('\n');
  const suggestion = rest.join(' ').replace(/^\((.*)\)$/, '$1');
  const hint = suggestion === '' ? 'add --help for usage' : `${suggestion} (add --help for usage)`;
  return new CapsuleError('USAGE', message, { hint }, { cause: err });
}
