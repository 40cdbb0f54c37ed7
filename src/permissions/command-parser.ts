import { createRequire } from 'node:module';
import type { Node, Parser } from 'web-tree-sitter';
import { CapsuleError } from '../errors.js';
import { makeKey, parseKey, RUN_COMMAND } from './keys.js';
import type { PermissionKey } from './types.js';

/** Longer commands are not parsed at all (fail closed: compound, keyed verbatim). */
export const MAX_COMMAND_LENGTH = 64 * 1024;

/** A program name that means one fixed executable: no globs, quotes, expansions, `:` or `=`. */
const SAFE_PROGRAM = /^[A-Za-z0-9_./+@%,-]+$/;

/**
 * Builtins and reserved words that run their arguments as shell code (or change what runs next): as a
 * program they make a command compound, so `run_command:*` never covers `eval 'a && b'`.
 */
const SHELL_EVALUATORS = new Set([
  'eval',
  'source',
  '.',
  'exec',
  'command',
  'builtin',
  'trap',
  'alias',
  'enable',
  'coproc',
  'time',
  'function',
]);

/** Node types an argument of a simple command may contain (whitelist: anything else is compound). */
const SIMPLE_ARGUMENT_NODES = new Set([
  'word',
  'string',
  'string_content',
  'raw_string',
  'ansi_c_string',
  'concatenation',
  'simple_expansion',
  'variable_name',
  'special_variable_name',
  'number',
  '"',
  '$',
]);

/** Nodes kept verbatim by normalization: their inner whitespace is data, not layout. */
const VERBATIM_NODES = new Set([
  'heredoc_redirect',
  'string',
  'raw_string',
  'ansi_c_string',
  'translated_string',
  'heredoc_body',
  'comment',
]);

export interface CommandAnalysis {
  /** The normalized command (see normalizeSpans): the action of a compound key. */
  normalized: string;
  compound: boolean;
  /** Program of a simple command (the action of its key). */
  program?: string | undefined;
  /** Why the command is compound (empty for a simple command); for explain. */
  reasons: string[];
  /** Every simple command inside it, normalized; deny rules are matched against each. */
  parts: string[];
}

export interface CommandKey {
  tool: 'run_command';
  key: string;
  compound: boolean;
}

/**
 * A bash parser (tree-sitter-bash through web-tree-sitter), created explicitly by the async factory
 * and reused by its owner. The grammar is loaded from the installed package, never the network.
 */
export class CommandParser {
  private constructor(private readonly parser: Parser) {}

  static async create(): Promise<CommandParser> {
    // Loaded here, not at start-up: only a process that keys a command pays for the parser.
    const { Language, Parser } = await import('web-tree-sitter');
    await Parser.init();
    const require = createRequire(import.meta.url);
    const language = await Language.load(require.resolve('tree-sitter-bash/tree-sitter-bash.wasm'));
    const parser = new Parser();
    parser.setLanguage(language);
    return new CommandParser(parser);
  }

  analyze(command: string): CommandAnalysis {
    const text = command.trim();
    if (text === '') {
      throw new CapsuleError('USAGE', 'The command is empty.', {
        hint: 'Pass the command after --, e.g. -- "git status".',
      });
    }
    if (text.length > MAX_COMMAND_LENGTH || text.includes('\0')) {
      return {
        normalized: text,
        compound: true,
        reasons: ['too long or contains NUL: not parsed'],
        parts: [],
      };
    }
    const tree = this.parser.parse(text);
    if (tree === null)
      return { normalized: text, compound: true, reasons: ['parser gave no tree'], parts: [] };
    try {
      const root = tree.rootNode;
      if (root.hasError || containsMissing(root)) {
        // Fail closed: an unparseable command needs its own whole-string approval, keyed verbatim.
        return { normalized: text, compound: true, reasons: ['parse error'], parts: [] };
      }
      const normalized = normalize(root, text);
      const parts = collectParts(root, text);
      const reasons: string[] = [];
      const program = simpleProgram(root, reasons);
      return program === undefined
        ? { normalized, compound: true, reasons, parts }
        : { normalized, compound: false, program, reasons: [], parts };
    } finally {
      tree.delete();
    }
  }

  /** Release the wasm memory. The parser must not be used afterwards. */
  close(): void {
    this.parser.delete();
  }
}

export function createCommandParser(): Promise<CommandParser> {
  return CommandParser.create();
}

/** The permission key of a command line: `run_command:<program>` or the whole normalized command. */
export function commandPermissionKey(analysis: CommandAnalysis): PermissionKey {
  return analysis.compound || analysis.program === undefined
    ? makeKey(RUN_COMMAND, analysis.normalized, true)
    : makeKey(RUN_COMMAND, analysis.program, false);
}

/** `capsule key`'s contract: `{"tool":"run_command","key":"…","compound":true|false}`. */
export function keyCommand(parser: CommandParser, command: string): CommandKey {
  const key = commandPermissionKey(parser.analyze(command));
  return { tool: 'run_command', key: key.raw, compound: key.compound };
}

function childrenOf(node: Node): Node[] {
  return node.children.filter((c): c is Node => c !== null);
}

function containsMissing(node: Node): boolean {
  if (node.isMissing) return true;
  return childrenOf(node).some(containsMissing);
}

/** The program of a simple command, or undefined (with the reasons) when anything makes it compound. */
function simpleProgram(root: Node, reasons: string[]): string | undefined {
  const top = childrenOf(root);
  if (top.length !== 1) {
    reasons.push(top.length === 0 ? 'no command' : 'several statements (newline, ;, & or comment)');
    return undefined;
  }
  const cmd = top[0] as Node;
  if (cmd.type !== 'command') {
    reasons.push(`${cmd.type.replace(/_/g, ' ')}`);
    return undefined;
  }
  let program: string | undefined;
  for (const child of childrenOf(cmd)) {
    if (child.type === 'command_name') {
      const inner = childrenOf(child);
      const word = inner[0];
      if (inner.length !== 1 || word === undefined || word.type !== 'word' || !SAFE_PROGRAM.test(word.text)) {
        reasons.push(
          'the command position is not a plain program name (variable, substitution, quote or glob)',
        );
        return undefined;
      }
      if (SHELL_EVALUATORS.has(word.text)) {
        reasons.push(`${word.text} runs its arguments as shell code`);
        return undefined;
      }
      program = word.text;
    } else if (child.type === 'variable_assignment') {
      reasons.push('environment variable prefix');
      return undefined;
    } else {
      const bad = firstNonSimple(child);
      if (bad !== undefined) {
        reasons.push(`${bad.replace(/_/g, ' ')} in an argument`);
        return undefined;
      }
    }
  }
  if (program === undefined) reasons.push('no program name');
  return program;
}

function firstNonSimple(node: Node): string | undefined {
  if (!SIMPLE_ARGUMENT_NODES.has(node.type)) return node.type;
  for (const child of node.children) {
    if (child === null) continue;
    const bad = firstNonSimple(child);
    if (bad !== undefined) return bad;
  }
  return undefined;
}

function collectParts(root: Node, text: string): string[] {
  const parts: string[] = [];
  const visit = (node: Node): void => {
    if (node.type === 'command') parts.push(normalize(node, text));
    for (const child of node.children) if (child !== null) visit(child);
  };
  visit(root);
  return parts;
}

/**
 * Normalization: tokens are kept as written; the layout between tokens is canonical — a run of blanks
 * becomes one space, blank runs holding newlines become one newline, and anything else between tokens
 * (a backslash-newline continuation) is kept verbatim so that two commands that behave differently
 * never share a key. Quoted strings, here-doc bodies and comments are kept byte for byte.
 */
function normalize(node: Node, text: string): string {
  const spans: Array<[number, number]> = [];
  const visit = (n: Node): void => {
    if (n.childCount === 0 || VERBATIM_NODES.has(n.type)) {
      if (n.endIndex > n.startIndex) spans.push([n.startIndex, n.endIndex]);
      return;
    }
    for (const child of n.children) if (child !== null) visit(child);
  };
  visit(node);
  let out = '';
  let last = -1;
  for (const [start, end] of spans) {
    if (start < last) continue; // overlapping spans do not occur in a valid tree; be defensive
    if (last >= 0 && start > last) {
      const gap = text.slice(last, start);
      if (/^[ \t]+$/.test(gap)) out += ' ';
      else if (/^[ \t\r\n]+$/.test(gap)) out += '\n';
      else out += gap;
    }
    out += text.slice(start, end);
    last = end;
  }
  return out;
}

/**
 * A `--grant` key in canonical form. run_command grants are checked against the parser: a compound
 * command is normalized (so extra spaces still match); `run_command:git status` is refused because keys of
 * simple commands name the program only — granting it as `run_command:git` must be a visible choice.
 */
export function canonicalGrantKey(parser: CommandParser, raw: string): string {
  const key = parseKey(raw);
  if (key.tool !== RUN_COMMAND || key.action === '*' || key.action.endsWith(':*')) return key.raw;
  const analysis = parser.analyze(key.action);
  if (analysis.compound) return commandPermissionKey(analysis).raw;
  if (analysis.program !== key.action) {
    throw new CapsuleError(
      'USAGE',
      `"${raw}" is not a key: a simple command is keyed by its program, e.g. run_command:${analysis.program ?? 'git'}.`,
      {
        key: raw,
        hint: `Use --grant run_command:${analysis.program ?? 'PROGRAM'} (covers every ${analysis.program} command).`,
      },
    );
  }
  return key.raw;
}
