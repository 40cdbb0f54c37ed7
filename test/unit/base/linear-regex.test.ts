import { Script, createContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { LinearRegexEngine } from '../../../src/base/linear-regex.js';
import { CATASTROPHIC } from '../../helpers/catastrophic-regex.js';

/** Whether plain `new RegExp` is still matching after `ms` (V8 stops it then). */
function backtrackingStillRunsAfter(pattern: string, input: string, ms: number): boolean {
  const context = createContext({ re: new RegExp(pattern, 'u'), input });
  try {
    new Script('re.test(input)').runInContext(context, { timeout: ms });
    return false;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') return true;
    throw err;
  }
}

describe('the linear-time engine', () => {
  const engine = new LinearRegexEngine();

  for (const [pattern, input] of CATASTROPHIC) {
    it(`answers ${pattern} on the input that explodes a backtracking engine`, async () => {
      await engine.load();
      const r = engine.compile(pattern);
      if (!r.ok) throw new Error(r.reason);
      // The answer a backtracking engine would give, had it the time: none of these match.
      expect(r.regex.test(input)).toBe(false);
    });
  }

  it('control: plain RegExp is still matching those inputs after a second (the inputs are catastrophic)', () => {
    for (const [pattern, input] of CATASTROPHIC) {
      expect(backtrackingStillRunsAfter(pattern, input, 1000), pattern).toBe(true);
    }
  });

  it('refuses what it cannot run in linear time, saying why', () => {
    for (const p of ['^(a)\\1$', '^(?<x>a)\\k<x>$', '^(?=a)a', '^(?!a)b', '(?<=a)b', '(?<!a)b']) {
      const r = engine.compile(p);
      expect(r.ok, p).toBe(false);
      expect(r.ok ? '' : r.reason, p).toMatch(/linear time/);
    }
  });

  it('refuses what is not a valid u-mode JavaScript pattern (the syntax check is JavaScript’s)', () => {
    for (const p of ['(a', 'a{2', '\\Qa\\E', '\\z', 'a{', '[\\s-x]']) {
      const r = engine.compile(p);
      expect(r.ok ? '' : r.reason, p).toMatch(/not a valid regular expression/);
    }
  });

  it('means what JavaScript means: the same answers as RegExp on a corpus', () => {
    const patterns = [
      '^[a-z][a-z0-9_-]{0,63}$',
      '^\\d{4}-\\d{2}-\\d{2}$',
      '^.+$',
      '^.*$',
      'a.c',
      '^\\s*$',
      '^\\S+$',
      '^[\\s,]+$',
      '^[^\\s]+$',
      '^\\w+$',
      '\\bword\\b',
      '^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$',
      '^\\p{L}+$',
      '^\\p{Lu}\\p{Ll}*$',
      '^\\u0041+$',
      '^\\u{1F600}$',
      '^[\\u00e0-\\u00ff]+$',
      '^\\x41$',
      '^\\cA$',
      '^[.]$',
      '^\\.$',
      '^(?<year>\\d{4})$',
      '^(?:foo|bar)+$',
      'x$',
      '^a|b$',
      '^[\\]\\[]+$',
      '^\\/path$',
      '^\\$\\{[a-z]+\\}$',
      '(a+)+$',
      '^(?:a|b)*?c$',
    ];
    const inputs = [
      '',
      'a',
      'abc',
      'a\nc',
      'a\rc',
      'a\u2028c',
      'a\u2029c',
      'a\u0085c',
      ' ',
      '\t\n',
      '\u00a0',
      '\u3000',
      '\ufeff',
      '\v',
      ' , ',
      'hello_world-1',
      '2026-12-02',
      'someone@example.com',
      'Élan',
      'ÉLAN',
      'AAA',
      '\u0001',
      '.',
      'x',
      '😀',
      'a word here',
      'swordfish',
      '[]]',
      '/path',
      '${abc}',
      'aaaa',
      'x\n',
      'abab c',
      'ababc',
      'foobarfoo',
      '1999',
      'é',
      'àÿ',
    ];
    const diffs: string[] = [];
    for (const p of patterns) {
      const r = engine.compile(p);
      if (!r.ok) throw new Error(`${p}: ${r.reason}`);
      const native = new RegExp(p, 'u');
      for (const s of inputs) {
        if (native.test(s) !== r.regex.test(s)) diffs.push(`${p} on ${JSON.stringify(s)}`);
      }
    }
    expect(diffs).toEqual([]);
  });

  it('ignoreCase folds as JavaScript’s i does', () => {
    const r = engine.compile('^straße$', { ignoreCase: true });
    if (!r.ok) throw new Error(r.reason);
    expect(r.regex.test('STRAßE')).toBe(true);
    expect(r.regex.test('strasse')).toBe(new RegExp('^straße$', 'iu').test('strasse'));
  });

  it('refuses \\S inside a class (it cannot be written as RE2 members), naming the rewrite', () => {
    const r = engine.compile('^[\\S]+$');
    expect(r.ok ? '' : r.reason).toMatch(/\\S" inside a character class/);
  });
});
