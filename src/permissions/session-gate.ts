import {
  PERMISSION_MODES,
  type LoadedProjectConfig,
  type PermissionMode,
} from '../project/project-config.js';
import { CapsuleError } from '../base/errors.js';
import type { CommandParser } from './commands/parser.js';
import { PermissionEngine } from './engine.js';
import { createNonInteractivePrompter, createTerminalPrompter, type Prompter } from './prompter.js';
import type { RuleSource } from './rules.js';
import type { AuditSink } from './audit/record.js';
import type { PolicySnapshotStore } from './policy-snapshot.js';

export interface SessionGateOptions {
  project: LoadedProjectConfig;
  /** `--grant KEY`, repeatable: session grants for this process. */
  grants?: readonly string[] | undefined;
  /** `--no-prompt`: every Ask is a denial. */
  noPrompt?: boolean | undefined;
  /** `--mode`; default: capsule.json `mode`. */
  mode?: string | undefined;
  /** Whether a human is at a terminal (stdin and stderr are TTYs). */
  interactive: boolean;
  /** Where the terminal prompt reads (built on first use) and writes; without both nobody is asked. */
  input?: (() => NodeJS.ReadableStream & { isTTY?: boolean | undefined }) | undefined;
  output?: NodeJS.WritableStream | undefined;
  /** Reuse a parser the caller already has (exec, explain); one is created when a run_command grant needs it. */
  parser?: CommandParser | undefined;
  profileRules?: readonly RuleSource[] | undefined;
  /** Where decisions go (false: nowhere): the caller opens it (runtime/audit.ts). */
  audit: AuditSink | false;
  logger?: ((message: string) => void) | undefined;
  /** Confirmed policies across processes; human-side grants and revokes keep it in step. */
  snapshots?: PolicySnapshotStore | undefined;
}

export function parseMode(mode: string | undefined): PermissionMode | undefined {
  if (mode === undefined) return undefined;
  if ((PERMISSION_MODES as readonly string[]).includes(mode)) return mode as PermissionMode;
  throw new CapsuleError('USAGE', `Unknown mode "${mode}": use one of ${PERMISSION_MODES.join(', ')}.`, {
    field: '--mode',
  });
}

/**
 * When nobody will be asked and no `--mode` was given, what a repository's bypass/edit mode does not do,
 * said up front (undefined when there is nothing to say).
 */
export function fileModeWarning(
  project: LoadedProjectConfig,
  mode: PermissionMode | undefined,
  interactive: boolean,
): string | undefined {
  const fileMode = project.config.mode;
  if (mode !== undefined || interactive || (fileMode !== 'bypass' && fileMode !== 'edit')) return undefined;
  return (
    `${project.file} sets mode "${fileMode}": ignored for unsandboxed calls (run_command, shell ` +
    'capabilities, docker that is not hardened, wasm with rw host grants, file writes), which are denied ' +
    'here unless granted. A project file can allow sandboxed calls only; use --grant KEY or --mode.'
  );
}

/** Who answers an Ask in a CLI process: a person at a terminal, unless `--no-prompt` or no TTY. */
export function cliPrompter(options: {
  noPrompt?: boolean | undefined;
  interactive: boolean;
  /** Standard input, built only when a prompt is possible (creating it costs start-up time). */
  input?: (() => NodeJS.ReadableStream & { isTTY?: boolean | undefined }) | undefined;
  output?: NodeJS.WritableStream | undefined;
}): Prompter {
  // No terminal to ask on is the same as nobody there: every Ask is a denial, never a hang.
  const { input, output } = options;
  return options.noPrompt === true || !options.interactive || input === undefined || output === undefined
    ? createNonInteractivePrompter()
    : createTerminalPrompter({ input: input(), output });
}

/**
 * The gate of one CLI (or server) session (docs/permissions.md): `--grant` gives session grants,
 * `--no-prompt` or no TTY turns every Ask into a denial (never a hang), `--mode` sets the mode.
 */
export async function createSessionEngine(options: SessionGateOptions): Promise<PermissionEngine> {
  const prompter = cliPrompter(options);
  const logger = options.logger ?? ((m: string) => void process.stderr.write(`capsule: ${m}\n`));
  const mode = parseMode(options.mode);
  const warning = fileModeWarning(options.project, mode, prompter.interactive);
  if (warning !== undefined) logger(warning);
  return PermissionEngine.create({
    projectRoot: options.project.root,
    configFile: options.project.file,
    config: options.project.config,
    mode,
    // The engine canonicalizes them (and builds a parser when a run_command grant needs one).
    sessionGrants: options.grants ?? [],
    prompter,
    commandParser: options.parser,
    profileRules: options.profileRules,
    audit: options.audit,
    logger,
    snapshots: options.snapshots,
  });
}
