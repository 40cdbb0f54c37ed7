import { Help, type Command } from 'commander';

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

/** commander help settings that wrap at word boundaries at any width. */
export function helpSettings(width: number): Partial<Help> {
  return {
    helpWidth: width,
    minWidthToWrap: 1,
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

/**
 * An "Exit codes:" section for `addHelpText('after', …)`: one row per code, each meaning wrapped between
 * words at the help's own width and continued under itself.
 */
export function exitCodesHelp(
  rows: ReadonlyArray<readonly [code: number, meaning: string]>,
  footer?: string,
): (context: { command: Command }) => string {
  return ({ command }) => {
    const helper = command.createHelp();
    const width = helper.helpWidth ?? 80;
    const term = Math.max(...rows.map(([code]) => String(code).length)) + 2;
    const lines = ['', 'Exit codes:'];
    for (const [code, meaning] of rows) {
      const wrapped = helper.boxWrap(meaning, Math.max(1, width - ITEM_INDENT - term));
      const [first = '', ...rest] = wrapped.split('\n');
      const pad = ' '.repeat(ITEM_INDENT + term);
      lines.push(
        `${' '.repeat(ITEM_INDENT)}${String(code).padEnd(term)}${first}`,
        ...rest.map((l) => pad + l),
      );
    }
    if (footer !== undefined) lines.push('', helper.boxWrap(footer, width));
    return lines.join('\n');
  };
}
