/**
 * What the bash syntax tree says, read without judging it: a word's static value, the words of a
 * command, its redirections, and the normalized text of a command.
 */
import type { Node } from 'web-tree-sitter';
import type { Word } from './words.js';

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

/**
 * The globs among a command's arguments, when every argument that is not static is a plain glob
 * (`*.ts`, `src/*.json`): what they expand to is bounded by their text. undefined when some other argument
 * is not static (a variable, a substitution, a brace expansion): it may be any word.
 */
export function argumentGlobs(cmd: Node): string[] | undefined {
  const globs: string[] = [];
  for (const child of childrenOf(cmd)) {
    const type = child.type;
    if (
      type === 'command_name' ||
      type === 'variable_assignment' ||
      type.endsWith('_redirect') ||
      type === 'comment'
    )
      continue;
    if (staticWord(child) !== null) continue;
    if (type !== 'word' || /[$`{}\\]/.test(child.text)) return undefined;
    globs.push(child.text);
  }
  return globs;
}

/** The words of a command node (program first), each static or null; undefined when it has no program. */
export function commandWords(cmd: Node): Word[] | undefined {
  const words: Word[] = [];
  let named = false;
  for (const child of childrenOf(cmd)) {
    const type = child.type;
    if (type === 'command_name') {
      const inner = childrenOf(child);
      words.unshift(inner.length === 1 ? staticWord(inner[0] as Node) : null);
      named = true;
    } else if (type === 'variable_assignment' || type.endsWith('_redirect') || type === 'comment') {
      continue;
    } else {
      words.push(staticWord(child));
    }
  }
  return named ? words : undefined;
}

/** Unquoted text that bash expands into other words: globs, brace expansion. */
const EXPANDS = /(?<!\\)[*?[]|\{[^{}]*(,|\.\.)[^{}]*\}/;

/** A word's value as bash passes it, or null when it depends on run time. */
export function staticWord(node: Node): Word {
  switch (node.type) {
    case 'word': {
      const t = node.text;
      if (!/[\\*?[{]/.test(t)) return t;
      if (EXPANDS.test(t)) return null;
      return t.replace(/\\\n/g, '').replace(/\\([\s\S])/g, '$1');
    }
    case 'number':
      return node.text;
    case 'raw_string':
      return node.text.slice(1, -1);
    case 'string': {
      for (const c of childrenOf(node)) if (c.type !== 'string_content' && c.type !== '"') return null;
      return node.text
        .slice(1, -1)
        .replace(/\\\n/g, '')
        .replace(/\\([$`"\\])/g, '$1');
    }
    case 'ansi_c_string':
      return ansiC(node.text.slice(2, -1));
    case 'concatenation': {
      if (
        EXPANDS.test(
          childrenOf(node)
            .filter((c) => c.type === 'word')
            .map((c) => c.text)
            .join(''),
        )
      )
        return null;
      let out = '';
      for (const c of childrenOf(node)) {
        const v =
          c.type === 'word' ? c.text.replace(/\\\n/g, '').replace(/\\([\s\S])/g, '$1') : staticWord(c);
        if (v === null) return null;
        out += v;
      }
      return out;
    }
    default:
      return null;
  }
}

const ANSI_ESCAPES: Record<string, string> = {
  n: '\n',
  t: '\t',
  r: '\r',
  a: '\x07',
  b: '\b',
  e: '\x1b',
  E: '\x1b',
  f: '\f',
  v: '\v',
  '\\': '\\',
  "'": "'",
  '"': '"',
  '?': '?',
};

/** `$'…'` decoding (bash's ANSI-C quoting); an unknown escape keeps its backslash, as bash does. */
function ansiC(body: string): Word {
  let out = '';
  for (let i = 0; i < body.length; i++) {
    const ch = body[i] as string;
    if (ch !== '\\' || i + 1 >= body.length) {
      out += ch;
      continue;
    }
    const next = body[i + 1] as string;
    const simple = ANSI_ESCAPES[next];
    if (simple !== undefined) {
      out += simple;
      i++;
      continue;
    }
    const hex = /^x([0-9a-fA-F]{1,2})/.exec(body.slice(i + 1));
    const oct = /^([0-7]{1,3})/.exec(body.slice(i + 1));
    const uni = /^(u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8})/.exec(body.slice(i + 1));
    if (hex !== null) {
      out += String.fromCharCode(parseInt(hex[1] as string, 16));
      i += hex[0].length;
    } else if (oct !== null) {
      out += String.fromCharCode(parseInt(oct[1] as string, 8) & 0xff);
      i += oct[0].length;
    } else if (uni !== null) {
      const cp = parseInt((uni[1] as string).slice(1), 16);
      if (cp > 0x10ffff) return null;
      out += String.fromCodePoint(cp);
      i += uni[0].length;
    } else if (next === 'c') {
      return null; // control characters: rare, not worth decoding
    } else {
      out += ch;
    }
  }
  return out;
}

export function childrenOf(node: Node): Node[] {
  return node.children.filter((c): c is Node => c !== null);
}

export function containsMissing(node: Node): boolean {
  if (node.isMissing) return true;
  return childrenOf(node).some(containsMissing);
}

/**
 * Normalization: tokens are kept as written; the layout between tokens is canonical — a run of blanks
 * becomes one space, blank runs holding newlines become one newline, and anything else between tokens
 * (a backslash-newline continuation) is kept verbatim so that two commands that behave differently
 * never share a key. Quoted strings, here-doc bodies and comments are kept byte for byte.
 */
export function normalize(node: Node, text: string): string {
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

/** The files a command line writes through redirections (`>`, `>>`, `&>`, `>|`); null: not static. */
export function redirectTargets(root: Node): Array<string | null> {
  const out: Array<string | null> = [];
  const visit = (node: Node): void => {
    if (node.type === 'file_redirect') {
      const op = node.children.find((c) => c !== null && /^(>|>>|&>|&>>|>\|)$/.test(c.type));
      const dest = node.children[node.children.length - 1];
      if (op !== undefined && dest !== null && dest !== undefined) {
        const t = dest.text;
        if (!t.startsWith('/dev/')) out.push(dest.type === 'word' && !/[$`*?[\\'"]/.test(t) ? t : null);
      }
    }
    for (const c of node.children) if (c !== null) visit(c);
  };
  visit(root);
  return out;
}
