/**
 * The bash parser and the facts it gathers for the gate: whether a command is simple, and everything it
 * runs (the judging of words is in the other files of this folder).
 */
import { createRequire } from 'node:module';
import type { Node, Parser } from 'web-tree-sitter';
import { CapsuleError } from '../../base/errors.js';
import { LOADS_CODE, hiddenRuns } from './hidden-runs.js';
import { argumentsMatter, keyingHazard } from './keying.js';
import { canonicalOptions } from './canonical-options.js';
import { codeFiles, writesCodeItRuns, writtenFiles } from './code-files.js';
import { evaluatesArguments } from './shells.js';
import { mayRunArguments } from './inert-programs.js';
import { unwrap } from './unwrap.js';
import type { Word } from './words.js';
import type { CommandFact, CommandFacts } from '../types.js';
import {
  argumentGlobs,
  childrenOf,
  commandWords,
  containsMissing,
  normalize,
  redirectTargets,
  staticWord,
} from './syntax-tree.js';

/** Longer commands are not parsed at all (fail closed: compound, keyed verbatim). */
export const MAX_COMMAND_LENGTH = 64 * 1024;

/** A program name that means one fixed executable: no globs, quotes, expansions, `:` or `=`. */
const SAFE_PROGRAM = /^[A-Za-z0-9_./+@%,-]+$/;

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
  /** What it runs, wrappers unwrapped and nested shell code parsed (deny rules). */
  facts: CommandFacts;
}

/** Nested shell code (`sh -c`, `eval`, `trap`) is parsed this deep; deeper is unprovable. */
const MAX_NESTING = 6;

/** Node types that evaluate text as code at run time (arithmetic, `[[ -v ]]`, declarations, `${x@P}`). */
const EVALUATING_NODES = new Set([
  'test_command',
  'declaration_command',
  'unset_command',
  'arithmetic_expansion',
  'expansion',
  'subscript',
  'binary_expression',
  'unary_expression',
  'postfix_expression',
  'ternary_expression',
  'parenthesized_expression',
  'c_style_for_statement',
]);

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

  /**
   * Parse and judge a command. `facts: false` skips what only deny rules need (the programs it runs),
   * for keying alone; the facts are then empty and marked unprovable, so a misuse fails closed.
   */
  analyze(command: string, options: { facts?: boolean } = {}): CommandAnalysis {
    const text = command.trim();
    if (text === '') {
      throw new CapsuleError('USAGE', 'The command is empty.', {
        hint: 'Pass the command after --, e.g. -- "git status".',
      });
    }
    const opaque = (reason: string): CommandAnalysis => ({
      normalized: text,
      compound: true,
      reasons: [reason],
      parts: [],
      facts: { commands: [], unprovable: [reason] },
    });
    if (text.length > MAX_COMMAND_LENGTH || text.includes('\0'))
      return opaque('too long or contains NUL: not parsed');
    // The parser takes a carriage return for a blank, bash for a word character: keyed verbatim.
    if (text.includes('\r')) return opaque('contains a carriage return: keyed verbatim');
    // bash joins the two sides of a backslash-newline inside a word (`r\⏎m` is `rm`); the parser splits them.
    if (/\S\\\n\S/.test(text)) return opaque('a line continuation inside a word: keyed verbatim');
    const tree = this.parser.parse(text);
    if (tree === null) return opaque('parser gave no tree');
    try {
      const root = tree.rootNode;
      // Fail closed: an unparseable command needs its own whole-string approval, keyed verbatim.
      if (root.hasError || containsMissing(root)) return opaque('parse error');
      const normalized = normalize(root, text);
      const parts: string[] = [];
      const facts: MutableFacts = { commands: [], unprovable: [], possible: [], opaque: [] };
      const only = root.childCount === 1 ? root.firstChild : null;
      const top: { id: number; words?: Word[] | undefined } = { id: only?.id ?? -1 };
      if (options.facts === false) facts.unprovable.push('facts not computed');
      this.collect(root, text, parts, facts, 0, top, options.facts !== false);
      if (options.facts !== false) {
        // A file written by one part and run as code by another: that code is not on the command line.
        const written = [
          ...redirectTargets(root),
          ...facts.commands.flatMap((c) => writtenFiles(c.name, c.args)),
        ];
        const runs = facts.commands.flatMap((c) => codeFiles(c.name, programAsWritten(c), c.args));
        if (writesCodeItRuns(written, runs))
          facts.unprovable.push(
            'one part writes a file that another part runs as code (a script, a makefile, git configuration)',
          );
      }
      const reasons: string[] = [];
      const program = simpleProgram(root, reasons, top.words);
      return program === undefined
        ? { normalized, compound: true, reasons, parts, facts }
        : { normalized, compound: false, program, reasons: [], parts, facts };
    } finally {
      tree.delete();
    }
  }

  /** Every command in the tree (and in the shell code it runs), unwrapped, into parts and facts. */
  private collect(
    root: Node,
    text: string,
    parts: string[] | undefined,
    facts: MutableFacts,
    depth: number,
    top?: { id: number; words?: Word[] | undefined },
    withFacts = true,
    /** The program capsule has no model of whose arguments this code is in (its commands only may run). */
    maybe?: string,
  ): void {
    let evaluating = false;
    let hiddenCode = false;
    // Text the parser cannot see until run time (command output, what `read` reads, file names a glob
    // yields): arithmetic evaluates a variable holding `a[$(…)]` as code, so it may hide a command.
    let runtimeText = false;
    // Reading node text is costly: look for code hidden in literals only when the text has some.
    // Backslashes are dropped first: `a[\$\(rm v\)]` is the literal `a[$(rm v)]` to bash.
    const mayHide = withFacts && HIDDEN_CODE.test(text.replace(/\\/g, ''));
    const mayGlob = withFacts && /[*?[]/.test(text);
    const visit = (node: Node): void => {
      const type = node.type;
      if (EVALUATING_NODES.has(type) || (type === 'compound_statement' && node.firstChild?.type === '(('))
        evaluating = true;
      else if (withFacts && type === 'variable_assignment') this.assignment(node, facts, depth);
      else if (
        mayHide &&
        (type === 'raw_string' || type === 'string_content' || type === 'ansi_c_string' || type === 'word') &&
        HIDDEN_CODE.test(node.text.replace(/\\/g, ''))
      )
        hiddenCode = true;
      // `$'\x24(…)'` spells `$(` with escapes the regex cannot read.
      if (withFacts && type === 'ansi_c_string' && node.text.includes('\\')) hiddenCode = true;
      if (withFacts && (type === 'command_substitution' || type === 'process_substitution'))
        runtimeText = true;
      if (mayGlob && type === 'word' && node.parent?.type !== 'command_name' && /[*?]|\[.*\]/.test(node.text))
        runtimeText = true;
      if (type === 'command') {
        if (parts !== undefined) parts.push(normalize(node, text));
        const isTop = top !== undefined && node.id === top.id;
        const words = withFacts ? commandWords(node) : undefined;
        if (isTop) top.words = words;
        if (withFacts && words !== undefined) {
          const [program, ...args] = words;
          if (program !== null && program !== undefined && evaluatesArguments(program, args))
            evaluating = true;
          const u = unwrap(program ?? null, args);
          for (const c of u.commands) {
            if (c.name === null) continue;
            if (READS_TEXT.has(c.name)) runtimeText = true;
            if (maybe === undefined) facts.commands.push(fact(c.program as string, c.name, c.args));
            else facts.possible.push({ ...fact(c.program as string, c.name, c.args), via: maybe });
            const hidden = hiddenRuns(c.name, c.args);
            if (hidden !== undefined) facts.unprovable.push(hidden);
            if (c.name === 'env') {
              for (const a of c.args) {
                const m = a === null ? null : /^([A-Za-z_][A-Za-z0-9_]*)=([\s\S]*)$/.exec(a);
                if (m !== null) this.variable(m[1] as string, m[2] as string, facts, depth);
              }
            }
            if (mayRunArguments(c.name))
              this.opaqueArguments(
                c.name,
                c.args,
                facts,
                depth,
                c === u.commands[0] ? argumentGlobs(node) : undefined,
              );
          }
          facts.unprovable.push(...u.unprovable);
          for (const script of u.scripts) this.nested(script, facts, depth + 1, false, maybe);
        }
      }
      for (const child of node.children) if (child !== null) visit(child);
    };
    visit(root);
    if (evaluating && hiddenCode)
      facts.unprovable.push('a string holds $(…) or `…` and something evaluates strings as code');
    else if (evaluating && runtimeText)
      facts.unprovable.push(
        'text known only at run time (command output, read, a glob) meets something that evaluates strings as code',
      );
  }

  /** `NAME=value` before a command, in a declaration or given to env. */
  private assignment(node: Node, facts: MutableFacts, depth: number): void {
    const name = node.childForFieldName('name')?.text ?? '';
    const value = node.childForFieldName('value');
    this.variable(name, value === null ? '' : staticWord(value), facts, depth);
  }

  /**
   * A variable's value may be a command a program runs (`GIT_PAGER='rm v' git -p log`): it is read as
   * shell code too (a value that does not parse cannot run as a command either). Variables that load
   * code or pick programs make the command unprovable.
   */
  private variable(name: string, value: Word, facts: MutableFacts, depth: number): void {
    if (LOADS_CODE.test(name)) {
      facts.unprovable.push(`${name} is set: it changes which code or program runs`);
      return;
    }
    if (value === null) {
      if (HOLDS_COMMAND.test(name)) facts.unprovable.push(`${name} is set to a value that is not static`);
      return;
    }
    this.nested(value, facts, depth + 1, true);
  }

  /**
   * A program capsule has no model of may run its arguments: as an argv (`setpriv rm v`: judged at
   * match time, from the words kept in `opaque`), as shell code in one word (`sg root -c 'rm v'`), or
   * through a program capsule does know (`setpriv find . -delete`). What those would run is `possible`.
   */
  private opaqueArguments(
    via: string,
    args: readonly Word[],
    facts: MutableFacts,
    depth: number,
    globs?: readonly string[],
  ): void {
    facts.opaque.push({ via, args, globs });
    let unwrapped = 0;
    for (const [i, a] of args.entries()) {
      if (a === null) continue;
      if (SHELL_TEXT.test(a)) {
        this.nested(a, facts, depth + 1, true, via);
        const value = /^[A-Za-z_][A-Za-z0-9_]*=([\s\S]+)$/.exec(a)?.[1];
        if (value !== undefined) this.nested(value, facts, depth + 1, true, via);
        continue;
      }
      if (!argumentsMatter(a)) continue;
      if (++unwrapped > MAX_OPAQUE_UNWRAPS) {
        facts.unprovable.push(`${via}: too many programs named in its arguments to judge`);
        return;
      }
      const u = unwrap(a, args.slice(i + 1), 1);
      for (const c of u.commands) {
        if (c.name === null) continue;
        facts.possible.push({ ...fact(c.program as string, c.name, c.args), via });
        const hidden = hiddenRuns(c.name, c.args);
        if (hidden !== undefined) facts.unprovable.push(`${via} may run ${c.name}: ${hidden}`);
      }
      facts.unprovable.push(...u.unprovable.map((r) => `${via} may run ${a}: ${r}`));
      for (const script of u.scripts) this.nested(script, facts, depth + 1, false, via);
    }
  }

  private nested(script: Word, facts: MutableFacts, depth: number, lenient = false, maybe?: string): void {
    if (script === null) {
      facts.unprovable.push('shell code that is not static');
      return;
    }
    const unparsable = (reason: string): void => {
      if (!lenient) facts.unprovable.push(reason);
    };
    if (
      depth > MAX_NESTING ||
      script.length > MAX_COMMAND_LENGTH ||
      script.includes('\0') ||
      script.includes('\r') ||
      /\S\\\n\S/.test(script)
    ) {
      // Too deep is never lenient: it would be a way to hide code.
      if (depth > MAX_NESTING) facts.unprovable.push('nested shell code too deep');
      else unparsable('nested shell code too long or not parseable');
      return;
    }
    if (script.trim() === '') return;
    const tree = this.parser.parse(script);
    if (tree === null) {
      unparsable('nested shell code gave no tree');
      return;
    }
    try {
      if (tree.rootNode.hasError || containsMissing(tree.rootNode)) {
        unparsable('nested shell code does not parse');
        return;
      }
      this.collect(tree.rootNode, script, undefined, facts, depth, undefined, true, maybe);
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

interface MutableFacts {
  commands: CommandFact[];
  unprovable: string[];
  possible: CommandFact[];
  opaque: Array<{ via: string; args: readonly Word[]; globs?: readonly string[] | undefined }>;
}

/** A word that may be shell code (blanks, operators, expansions) when a program runs it as such. */
const SHELL_TEXT = /[\s;&|<>()$`]/;

/** Programs capsule knows, named in the arguments of one it does not, that are looked into. */
const MAX_OPAQUE_UNWRAPS = 16;

/** Variables whose value programs run as a command (pagers, editors, ssh, askpass helpers …). */
const HOLDS_COMMAND =
  /(PAGER|EDITOR|VISUAL|SSH|ASKPASS|LESSOPEN|LESSCLOSE|BROWSER|SHELL|RSH|COMMAND|EXTERNAL_DIFF|PROGRAM)/;

/** Builtins that put text read at run time into variables. */
const READS_TEXT = new Set(['read', 'mapfile', 'readarray']);

/** `$(`, a backtick or a process substitution inside a literal: code if something evaluates the literal. */
const HIDDEN_CODE = /\$\(|`|[<>]\(/;

function fact(program: string, name: string, args: readonly Word[]): CommandFact {
  const tail = args.map((a) => a ?? '').join(' ');
  const line = (head: string): string => (tail === '' ? head : `${head} ${tail}`);
  const texts = program === name ? [line(name)] : [line(name), line(program)];
  if (!args.some((a) => a === null)) {
    const canonical = canonicalOptions([name, ...(args as string[])]);
    if (canonical !== undefined && !texts.includes(canonical)) texts.push(canonical);
  }
  return { name, texts, args, dynamic: args.some((a) => a === null) };
}

/** The program of a simple command, or undefined (with the reasons) when anything makes it compound. */
function simpleProgram(root: Node, reasons: string[], topWords: Word[] | undefined): string | undefined {
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
  if (program === undefined) {
    reasons.push('no program name');
    return undefined;
  }
  if (!argumentsMatter(program)) return program;
  const words = topWords ?? commandWords(cmd) ?? [];
  const hazard = keyingHazard(program, words.slice(1));
  if (hazard !== undefined) {
    reasons.push(hazard);
    return undefined;
  }
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

/** The program of a fact as written (`./build.sh`, `/bin/rm`), or its name. */
function programAsWritten(fact: CommandFact): string {
  const asPath = fact.texts.find((t) => t.split(' ')[0] !== fact.name);
  return asPath?.split(' ')[0] ?? fact.name;
}
