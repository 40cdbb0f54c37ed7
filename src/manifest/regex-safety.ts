/**
 * Which regular expressions a manifest's schemas may hold. Ajv runs `pattern` and `patternProperties`
 * with V8's backtracking engine in capsule's own process, so a pattern that backtracks
 * catastrophically would hang capsule on one crafted input. Such patterns are refused when the
 * manifest loads (docs/manifest.md, "Patterns in schemas"). The check parses the pattern (a small
 * tokenizer for the `u`-mode syntax Ajv compiles with) and refuses, conservatively:
 * - a repeated group that contains a quantifier (star height above one: `(a+)+`, `(a{1,})*`, `(a?){9}`),
 * - alternation inside a repeated group unless every option starts with its own literal character
 *   (`(a|a)*` is refused, `(foo|bar)+` is not),
 * - backreferences (`\1`, `\k<name>`), and lookarounds that contain or carry a quantifier.
 * What cannot be parsed is refused too.
 */

type Node =
  | { kind: 'seq'; items: Node[] }
  | { kind: 'alt'; options: Node[] }
  | { kind: 'group'; body: Node; look: boolean }
  | { kind: 'quant'; body: Node; min: number; max: number }
  | { kind: 'atom'; literal: string | undefined }
  | { kind: 'empty' }
  | { kind: 'backref' };

class Unparsable extends Error {}

class Parser {
  private i = 0;
  constructor(private readonly src: string) {}

  parse(): Node {
    const node = this.alternation();
    if (this.i < this.src.length) throw new Unparsable(`unexpected "${this.src[this.i]}" at ${this.i}`);
    return node;
  }

  private peek(): string | undefined {
    return this.src[this.i];
  }

  private alternation(): Node {
    const options = [this.sequence()];
    while (this.peek() === '|') {
      this.i++;
      options.push(this.sequence());
    }
    return options.length === 1 ? (options[0] as Node) : { kind: 'alt', options };
  }

  private sequence(): Node {
    const items: Node[] = [];
    while (this.i < this.src.length && this.peek() !== '|' && this.peek() !== ')') {
      let node = this.atom();
      for (;;) {
        const q = this.quantifier();
        if (q === undefined) break;
        node = { kind: 'quant', body: node, min: q.min, max: q.max };
      }
      items.push(node);
    }
    return { kind: 'seq', items };
  }

  /** `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}`, each optionally lazy; undefined when none follows. */
  private quantifier(): { min: number; max: number } | undefined {
    const c = this.peek();
    let q: { min: number; max: number } | undefined;
    if (c === '*') q = { min: 0, max: Infinity };
    else if (c === '+') q = { min: 1, max: Infinity };
    else if (c === '?') q = { min: 0, max: 1 };
    if (q !== undefined) this.i++;
    else if (c === '{') {
      const close = this.src.indexOf('}', this.i);
      const body = close < 0 ? '' : this.src.slice(this.i + 1, close);
      const parts = body.split(',');
      const isNum = (s: string): boolean => s.length > 0 && [...s].every((d) => d >= '0' && d <= '9');
      if (parts.length === 1 && isNum(parts[0] as string)) {
        q = { min: Number(parts[0]), max: Number(parts[0]) };
      } else if (
        parts.length === 2 &&
        isNum(parts[0] as string) &&
        (parts[1] === '' || isNum(parts[1] as string))
      ) {
        q = { min: Number(parts[0]), max: parts[1] === '' ? Infinity : Number(parts[1]) };
      } else throw new Unparsable(`a "{" that is not a quantifier at ${this.i}`);
      this.i = close + 1;
    }
    if (q !== undefined && this.peek() === '?') this.i++; // lazy: the same backtracking
    return q;
  }

  private atom(): Node {
    const c = this.src[this.i++] as string;
    switch (c) {
      case '(':
        return this.group();
      case '[':
        this.characterClass();
        return { kind: 'atom', literal: undefined };
      case '\\':
        return this.escape();
      case '.':
        return { kind: 'atom', literal: undefined };
      case '^':
      case '$':
        return { kind: 'empty' };
      case '*':
      case '+':
      case '?':
      case '{':
      case '}':
      case ']':
      case ')':
        throw new Unparsable(`a "${c}" with nothing to apply to at ${this.i - 1}`);
      default:
        return { kind: 'atom', literal: c };
    }
  }

  private group(): Node {
    let look = false;
    if (this.src.startsWith('?:', this.i)) this.i += 2;
    else if (this.src.startsWith('?=', this.i) || this.src.startsWith('?!', this.i)) {
      this.i += 2;
      look = true;
    } else if (this.src.startsWith('?<=', this.i) || this.src.startsWith('?<!', this.i)) {
      this.i += 3;
      look = true;
    } else if (this.src.startsWith('?<', this.i)) {
      const close = this.src.indexOf('>', this.i);
      if (close < 0) throw new Unparsable(`an unterminated group name at ${this.i}`);
      this.i = close + 1;
    } else if (this.peek() === '?') throw new Unparsable(`an unknown group kind at ${this.i}`);
    const body = this.alternation();
    if (this.peek() !== ')') throw new Unparsable('an unclosed group');
    this.i++;
    return { kind: 'group', body, look };
  }

  /** Skips `[...]` (the opening bracket already read); escapes inside are single tokens. */
  private characterClass(): void {
    while (this.i < this.src.length) {
      const c = this.src[this.i++];
      if (c === '\\') this.i++;
      else if (c === ']') return;
    }
    throw new Unparsable('an unclosed character class');
  }

  private escape(): Node {
    const c = this.src[this.i++];
    if (c === undefined) throw new Unparsable('a trailing backslash');
    if (c >= '1' && c <= '9') return { kind: 'backref' };
    if (c === 'k' && this.peek() === '<') return { kind: 'backref' };
    if (c === 'b' || c === 'B') return { kind: 'empty' };
    if ('dDwWsS'.includes(c)) return { kind: 'atom', literal: undefined };
    const hex = (from: number, to: number): string => {
      const digits = this.src.slice(from, to);
      if (!/^[0-9a-fA-F]+$/.test(digits)) throw new Unparsable(`a bad hex escape at ${from}`);
      return String.fromCodePoint(parseInt(digits, 16));
    };
    if (c === 'p' || c === 'P' || (c === 'u' && this.peek() === '{')) {
      const close = this.src.indexOf('}', this.i);
      if (this.peek() !== '{' || close < 0) throw new Unparsable(`an unterminated \\${c}{ at ${this.i}`);
      const from = this.i + 1;
      this.i = close + 1;
      return { kind: 'atom', literal: c === 'u' ? hex(from, close) : undefined };
    }
    if (c === 'u' || c === 'x') {
      const from = this.i;
      this.i += c === 'u' ? 4 : 2;
      return { kind: 'atom', literal: hex(from, this.i) };
    }
    if (c === 'c') {
      const letter = this.src[this.i++] ?? '';
      return { kind: 'atom', literal: String.fromCharCode(letter.charCodeAt(0) % 32) };
    }
    const controls: Record<string, string> = { n: '\n', r: '\r', t: '\t', f: '\f', v: '\v', '0': '\0' };
    // An escaped syntax character (`\.`, `\(`, …) is that character.
    return { kind: 'atom', literal: controls[c] ?? c };
  }
}

const repeats = (n: Node): boolean => n.kind === 'quant' && n.max > 1;

function containsQuantifier(n: Node): boolean {
  switch (n.kind) {
    case 'quant':
      return true;
    case 'seq':
      return n.items.some(containsQuantifier);
    case 'alt':
      return n.options.some(containsQuantifier);
    case 'group':
      return containsQuantifier(n.body);
    default:
      return false;
  }
}

/** The literal character every match of `n` starts with, when there is one. */
function firstLiteral(n: Node): string | undefined {
  switch (n.kind) {
    case 'atom':
      return n.literal;
    case 'group':
      return n.look ? undefined : firstLiteral(n.body);
    case 'quant':
      return n.min >= 1 ? firstLiteral(n.body) : undefined;
    case 'seq': {
      const first = n.items[0];
      return first === undefined ? undefined : firstLiteral(first);
    }
    default:
      return undefined;
  }
}

/** An alternation the engine can decide by one character: every option starts with its own literal. */
function deterministic(alt: { options: Node[] }): boolean {
  const firsts = alt.options.map(firstLiteral);
  return firsts.every((f) => f !== undefined) && new Set(firsts).size === firsts.length;
}

/** The first hazard in `n`; `repeated` when an enclosing quantifier lets it match more than once. */
function hazard(n: Node, repeated: boolean): string | undefined {
  switch (n.kind) {
    case 'backref':
      return 'it has a backreference';
    case 'quant':
      if (repeats(n) && containsQuantifier(n.body))
        return 'a repeated group contains a quantifier (nested quantifiers)';
      if (n.body.kind === 'group' && n.body.look) return 'a lookaround carries a quantifier';
      return hazard(n.body, repeated || repeats(n));
    case 'group':
      if (n.look && containsQuantifier(n.body)) return 'a lookaround contains a quantifier';
      return hazard(n.body, repeated);
    case 'alt':
      if (repeated && !deterministic(n))
        return 'a repeated group holds alternatives that can start with the same character';
      for (const o of n.options) {
        const h = hazard(o, repeated);
        if (h !== undefined) return h;
      }
      return undefined;
    case 'seq':
      for (const item of n.items) {
        const h = hazard(item, repeated);
        if (h !== undefined) return h;
      }
      return undefined;
    default:
      return undefined;
  }
}

/** Why `source` may not be a schema's pattern (as Ajv compiles it, with the `u` flag), or undefined. */
export function regexHazard(source: string): string | undefined {
  try {
    new RegExp(source, 'u');
  } catch (err) {
    return `it is not a valid regular expression (${(err as Error).message})`;
  }
  let tree: Node;
  try {
    tree = new Parser(source).parse();
  } catch (err) {
    if (!(err instanceof Unparsable)) throw err;
    return `capsule cannot analyse it (${err.message})`;
  }
  const h = hazard(tree, false);
  return h === undefined ? undefined : `it can backtrack catastrophically: ${h}`;
}

/**
 * Keywords whose value maps names to schemas: a name there is the user's (a property may be called
 * `enum`), so every value is a schema, whatever its name.
 */
const SCHEMA_MAPS = new Set([
  'properties',
  'patternProperties',
  '$defs',
  'definitions',
  'dependencies',
  'dependentSchemas',
]);

/**
 * The first regular expression in `schema` (a `pattern` value or a `patternProperties` key, at any
 * depth: properties, items, $defs, propertyNames, …) that capsule refuses, naming where it is.
 */
export function schemaRegexProblem(schema: unknown, field: string): string | undefined {
  const visit = (node: unknown, at: string, isMap: boolean): string | undefined => {
    if (Array.isArray(node)) {
      for (const [i, v] of node.entries()) {
        const p = visit(v, `${at}[${i}]`, false);
        if (p !== undefined) return p;
      }
      return undefined;
    }
    if (node === null || typeof node !== 'object') return undefined;
    const obj = node as Record<string, unknown>;
    if (isMap) {
      for (const [k, v] of Object.entries(obj)) {
        const p = visit(v, `${at}.${k}`, false);
        if (p !== undefined) return p;
      }
      return undefined;
    }
    if (typeof obj.pattern === 'string') {
      const h = regexHazard(obj.pattern);
      if (h !== undefined) return `${at}.pattern ${JSON.stringify(obj.pattern)} is refused: ${h}`;
    }
    const pp = obj.patternProperties;
    if (pp !== null && typeof pp === 'object' && !Array.isArray(pp)) {
      for (const key of Object.keys(pp)) {
        const h = regexHazard(key);
        if (h !== undefined) return `${at}.patternProperties key ${JSON.stringify(key)} is refused: ${h}`;
      }
    }
    // Data keywords (enum, const, default, examples) are walked too: a `$ref` such as `#/default`
    // makes Ajv compile what is there as a schema.
    for (const [k, v] of Object.entries(obj)) {
      const p = visit(v, `${at}.${k}`, SCHEMA_MAPS.has(k));
      if (p !== undefined) return p;
    }
    return undefined;
  };
  return visit(schema, field, false);
}
