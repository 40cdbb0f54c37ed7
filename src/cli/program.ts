import { Command, CommanderError } from 'commander';
import { registerAudit } from './commands/audit.js';
import { registerCi } from './commands/ci.js';
import { registerCompare } from './commands/compare.js';
import { registerEngines } from './commands/engines.js';
import { registerExec } from './commands/exec.js';
import { registerExplain } from './commands/explain.js';
import { registerGrants } from './commands/grants.js';
import { registerImages } from './commands/images.js';
import { registerKey } from './commands/key.js';
import { registerList } from './commands/list.js';
import { registerMcp } from './commands/mcp.js';
import { registerReload } from './commands/reload.js';
import { registerRules } from './commands/rules.js';
import { registerRun } from './commands/run.js';
import { registerShow } from './commands/show.js';
import { registerValidate } from './commands/validate.js';
import { registerWasmRun } from './commands/wasm-run.js';
import { EXIT } from './exit-codes.js';
import { reportError, write, type CliIO } from './output.js';

export const VERSION = '0.1.0';

/** Build the command tree. Each command lives in its own file under commands/. */
export function buildProgram(io: CliIO): Command {
  const program = new Command();
  program
    .name('capsule')
    .description(
      'Sandboxed capability executor for self-authoring AI agents.\n' +
        'Capabilities live in capabilities/<name>/capability.json; the project root is the nearest folder holding capsule.json.',
    )
    .version(VERSION)
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({
      writeOut: (s) => void write(io.stdout, s),
      writeErr: (s) => void write(io.stderr, s),
    })
    .exitOverride();
  registerList(program, io);
  registerShow(program, io);
  registerValidate(program, io);
  registerRun(program, io);
  registerMcp(program, io);
  registerCi(program, io);
  registerCompare(program, io);
  registerImages(program, io);
  registerEngines(program, io);
  registerExec(program, io);
  registerKey(program, io);
  registerExplain(program, io);
  registerGrants(program, io);
  registerReload(program, io);
  registerAudit(program, io);
  registerRules(program, io);
  registerWasmRun(program, io);
  for (const command of program.commands) command.exitOverride();
  return program;
}

/** Run the CLI; returns the exit code instead of exiting, so tests can call it in-process. */
export async function runCli(argv: readonly string[], io: CliIO): Promise<number> {
  const program = buildProgram(io);
  const wantsJson = argv.includes('--json');
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return io.exitCode;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end here with code 0; usage mistakes with EX_USAGE.
      return err.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
    }
    return reportError(io, err, wantsJson);
  }
}
