import { createRequire } from 'node:module';
import type * as Re2 from 're2js';

/**
 * Regular expressions that capsule matches against untrusted text (schema patterns, an agent's grep
 * pattern) run on RE2 (the pure-JS port `re2js`): matching takes time linear in the text, whatever
 * the pattern, so no pattern/text pair can stall capsule the way a backtracking engine can
 * (`^(a+)+$` on 40 `a`s and a `!`). Patterns are written in JavaScript's syntax (with the `u` flag,
 * as JSON Schema asks) and keep its meaning: `.` and `\s`/`\S` are rewritten to JavaScript's sets
 * (RE2's `.` lets `\r`, U+2028 and U+2029 through, its `\s` is ASCII only). What RE2 cannot run in
 * linear time — backreferences, lookahead and lookbehind — is refused with the reason
 * (docs/manifest.md, "Patterns in schemas").
 */

/** What a compiled pattern offers: a test, like RegExp's (no flags, no state between calls). */
export interface LinearRegex {
  test(text: string): boolean;
  /** The pattern as written (JavaScript syntax). */
  readonly source: string;
  /**
   * The instructions of its compiled program: matching steps through at most these per character of
   * text. Counted repetition makes it far larger than the source (`(?:a?){1000}` is 12 characters).
   */
  readonly steps: number;
}

type Re2Module = typeof Re2;

/** How many compiled patterns an engine keeps. */
const MAX_CACHED = 1000;

/** JavaScript's `\s` (WhiteSpace and LineTerminator), written as members of a character class. */
const JS_SPACE = '\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff';
/** JavaScript's `.` without the `s` flag: anything but a line terminator. */
const JS_DOT = '[^\\n\\r\\u2028\\u2029]';

/**
 * Pure: the pattern with `.`, `\s` and `\S` spelled out as JavaScript means them, or why that cannot be
 * done. `source` is a valid `u`-mode RegExp (checked before), so every `\` starts a whole escape and
 * `[` … `]` nest only as classes.
 */
function withJavaScriptSets(source: string): { ok: true; source: string } | { ok: false; reason: string } {
  let out = '';
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i] as string;
    if (c === '\\') {
      const next = source[i + 1] ?? '';
      i++;
      // In u-mode `\1`…`\9` and `\k<name>` are always backreferences (RE2 would read `\k` as a `k`).
      if ((next >= '1' && next <= '9') || next === 'k')
        return { ok: false, reason: 'a backreference cannot be matched in linear time (RE2 has none)' };
      if (next === 's') out += inClass ? JS_SPACE : `[${JS_SPACE}]`;
      else if (next === 'S') {
        if (inClass)
          return {
            ok: false,
            reason:
              'a "\\S" inside a character class is not supported (write it as an alternative: (?:\\S|[…]))',
          };
        out += `[^${JS_SPACE}]`;
      } else out += `\\${next}`;
    } else if (inClass) {
      if (c === ']') inClass = false;
      out += c;
    } else if (c === '[') {
      inClass = true;
      out += c;
      // A `]` or `^]` right after `[` is not a literal in JavaScript (`[]` matches nothing); RE2
      // refuses both, which is what capsule wants.
    } else out += c === '.' ? JS_DOT : c;
  }
  return { ok: true, source: out };
}

/**
 * The linear-time engine, loaded on first need (it is only needed by a command that reads a schema
 * with a pattern or matches one). Owned by whoever checks patterns; no module-level state.
 */
export class LinearRegexEngine {
  #re2: Re2Module | undefined;
  readonly #cache = new Map<string, { ok: true; regex: LinearRegex } | { ok: false; reason: string }>();

  /** Loads re2js ahead of a synchronous compile (an import, so the built CLI carries it in its bundle). */
  async load(): Promise<void> {
    this.#re2 ??= await import('re2js');
  }

  private get re2(): Re2Module {
    // The synchronous fallback (code that compiles without calling load() first) reads node_modules.
    this.#re2 ??= createRequire(import.meta.url)('re2js') as Re2Module;
    return this.#re2;
  }

  /**
   * `source` compiled for linear-time matching, or why it cannot be (a sentence, no trailing period).
   * `ignoreCase` is JavaScript's `i` flag (Unicode case folding, as with `u`).
   */
  compile(
    source: string,
    options: { ignoreCase?: boolean } = {},
  ): { ok: true; regex: LinearRegex } | { ok: false; reason: string } {
    const ignoreCase = options.ignoreCase === true;
    const key = `${ignoreCase ? 'i' : '-'}${source}`;
    let hit = this.#cache.get(key);
    if (hit === undefined) {
      hit = this.#compile(source, ignoreCase);
      // A long session compiles whatever patterns an agent sends: the cache stays bounded.
      if (this.#cache.size >= MAX_CACHED) this.#cache.clear();
      this.#cache.set(key, hit);
    }
    return hit;
  }

  /**
   * Drops every compiled pattern: after a match was stopped mid-way (a deadline), a pattern's matching
   * state (its DFA cache) may be half-updated, so it is compiled afresh.
   */
  forget(): void {
    this.#cache.clear();
  }

  /** Why `source` cannot be matched in linear time (or is not a valid pattern), or undefined. */
  problem(source: string): string | undefined {
    const r = this.compile(source);
    return r.ok ? undefined : r.reason;
  }

  #compile(
    source: string,
    ignoreCase: boolean,
  ): { ok: true; regex: LinearRegex } | { ok: false; reason: string } {
    try {
      // Only parsed, never run: the syntax check is JavaScript's own (what JSON Schema patterns are).
      new RegExp(source, 'u');
    } catch (err) {
      return { ok: false, reason: `it is not a valid regular expression (${(err as Error).message})` };
    }
    const rewritten = withJavaScriptSets(source);
    if (!rewritten.ok) return rewritten;
    const { RE2JS: Engine } = this.re2;
    let compiled: Re2.RE2JS;
    try {
      compiled = Engine.compile(
        Engine.translateRegExp(rewritten.source),
        ignoreCase ? Engine.CASE_INSENSITIVE : 0,
      );
    } catch (err) {
      return {
        ok: false,
        reason: `capsule matches patterns in linear time (RE2), which has no backreferences, lookahead or lookbehind, and this one does not compile there (${(err as Error).message})`,
      };
    }
    return {
      ok: true,
      regex: { source, steps: compiled.programSize(), test: (text) => compiled.matcher(text).find() },
    };
  }
}
