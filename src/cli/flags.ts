import { Option, type Command } from 'commander';
import { PERMISSION_MODES, type PermissionMode } from '../project/modes.js';
import type { SessionFlags } from './session.js';

function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** The gate flags shared by every command that runs something (docs/cli.md, "Grants on the command line"). */
export function addGateFlags(command: Command): Command {
  return command
    .option(
      '--grant <key>',
      'session-level grant for this process (repeatable), e.g. run_capability:hello',
      collect,
      [],
    )
    .option(
      '--grant-for <lifetime=key>',
      'session grant that ends: once=KEY, 3x=KEY (uses), 10m=KEY (time: s, m, h, d), 3x,10m=KEY (repeatable)',
      collect,
      [],
    )
    .option('--no-prompt', 'never ask: every Ask becomes a denial (exit 77)')
    .addOption(new Option('--mode <mode>', 'permission mode').choices(PERMISSION_MODES));
}

/** `--engine NAME[,NAME]` on the commands that run capabilities (run, compare, ci). */
export function addEngineFlag(command: Command): Command {
  return command.option(
    '--engine <names>',
    'run docker capabilities only on these configured engines (comma list; see capsule engines). Default: $CAPSULE_ENGINE, else every healthy engine',
  );
}

export interface GateFlags {
  /** --engine (run, compare, ci). */
  engine?: string;
  grant: string[];
  /** --grant-for LIFETIME=KEY, as typed (parsed by openSession). */
  grantFor?: string[];
  /** commander maps --no-prompt to prompt=false. */
  prompt: boolean;
  mode?: PermissionMode;
}

/** The gate flags in openSession's terms: every command that opens its session from them says it this way. */
export function sessionFlags(
  opts: GateFlags,
  extra: Pick<SessionFlags, 'command' | 'json' | 'parser'> = {},
): SessionFlags {
  return {
    grants: opts.grant,
    grantFor: opts.grantFor,
    noPrompt: !opts.prompt,
    mode: opts.mode,
    engine: opts.engine,
    ...extra,
  };
}
