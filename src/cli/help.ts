import { Help, type Command } from 'commander';
import { COMMAND_EXIT_CODES, exitCodesHelp } from './exit-codes.js';

/** Below this many columns beside its term, a description moves to its own lines under the term. */
const MIN_DESCRIPTION_WIDTH = 24;
const ITEM_INDENT = 2;
const UNDER_TERM_INDENT = 6;

/**
 * The width help is wrapped to: `COLUMNS` when set, else the terminal's width, else 80. commander alone
 * stops wrapping when the space beside a term is narrow, and the terminal then splits words; here every
 * width wraps between words (a word longer than a line stays whole on its own line).
 */
export function helpWidth(env: NodeJS.ProcessEnv, stream: NodeJS.WritableStream): number {
  const fromEnv = Number(env.COLUMNS);
  if (Number.isInteger(fromEnv) && fromEnv > 0) return fromEnv;
  const tty = stream as { isTTY?: boolean; columns?: number };
  if (tty.isTTY === true && tty.columns !== undefined && tty.columns > 0) return tty.columns;
  return 80;
}

/**
 * A description's source line breaks are where its author split a long string literal, not where a
 * reader's line should end: they are joined, so the text wraps to the width instead of breaking
 * mid-sentence. A blank line (a new paragraph) or an indented line (a list) stays.
 */
export function reflow(text: string): string {
  return text.replace(/([^\n])\n(?=\S)(?!- )/g, '$1 ');
}

/** commander help settings that wrap at word boundaries at any width. */
export function helpSettings(width: number): Partial<Help> {
  return {
    helpWidth: width,
    minWidthToWrap: 1,
    commandDescription(cmd: Command): string {
      return reflow(Help.prototype.commandDescription.call(this, cmd));
    },
    formatItem(term: string, termWidth: number, description: string, helper: Help): string {
      const beside = width - termWidth - ITEM_INDENT - 2;
      if (description === '' || beside >= MIN_DESCRIPTION_WIDTH) {
        return Help.prototype.formatItem.call(this, term, termWidth, description, helper);
      }
      return [
        indented(helper, term, ITEM_INDENT, width),
        indented(helper, description, UNDER_TERM_INDENT, width),
      ].join('\n');
    },
    formatHelp(command: Command, helper: Help): string {
      // commander leaves the usage line whole; a long one wraps like the rest, continued under it.
      const [usage = '', ...rest] = Help.prototype.formatHelp.call(this, command, helper).split('\n');
      const wrapped = helper.boxWrap(usage, Math.max(1, width - ITEM_INDENT));
      return [wrapped.replace(/\n/g, `\n${' '.repeat(ITEM_INDENT)}`), ...rest].join('\n');
    },
  };
}

function indented(helper: Help, text: string, indent: number, width: number): string {
  const pad = ' '.repeat(indent);
  return pad + helper.boxWrap(text, Math.max(1, width - indent)).replace(/\n/g, `\n${pad}`);
}

/** A command's path below the program (`grants revoke`), as COMMAND_EXIT_CODES names it. */
export function commandPath(command: Command): string {
  const names: string[] = [];
  for (let at: Command | null = command; at?.parent != null; at = at.parent) names.unshift(at.name());
  return names.join(' ');
}

/** Every command that runs something (not a group of subcommands), depth first. */
export function leafCommands(program: Command): Command[] {
  return program.commands.flatMap((c) => (c.commands.length > 0 ? leafCommands(c) : [c]));
}

/**
 * Give every command's --help its "Exit codes:" section from the one table (COMMAND_EXIT_CODES), wrapped
 * like the rest of the help. A command missing from the table is a bug caught at start-up by the tests.
 */
export function addExitCodeHelp(program: Command, width: number): void {
  for (const command of leafCommands(program)) {
    const codes = COMMAND_EXIT_CODES[commandPath(command)];
    if (codes === undefined) continue;
    // Wrapped between words at any width, like helpSettings (commander's default stops below 40).
    const helper = Object.assign(new Help(), { minWidthToWrap: 1 });
    command.addHelpText('after', () => exitCodesHelp(codes, (text, w) => helper.boxWrap(text, w), width));
  }
}
