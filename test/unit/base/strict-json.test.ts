import { describe, expect, it } from 'vitest';
import { parseStrictJson } from '../../../src/base/strict-json.js';

function dup(text: string): string | undefined {
  const r = parseStrictJson(text);
  return !r.ok && r.kind === 'duplicate-key' ? r.field : undefined;
}

describe('parseStrictJson', () => {
  it('gives the same value as JSON.parse for documents without repeated keys', () => {
    const text = '{"a": [1, {"b": "}{,\\"", "c": null}], "d": {"a": 1}, "e": [{"x": 1}, {"x": 2}]}';
    expect(parseStrictJson(text)).toEqual({ ok: true, value: JSON.parse(text) });
    expect(parseStrictJson('[]')).toEqual({ ok: true, value: [] });
    expect(parseStrictJson('"x"')).toEqual({ ok: true, value: 'x' });
  });

  it('reports a repeated key at any depth with its path', () => {
    expect(dup('{"a": 1, "a": 2}')).toBe('a');
    expect(dup('{"permissions": {"deny": ["x"], "deny": []}}')).toBe('permissions.deny');
    expect(dup('{"cases": [{"name": "a"}, {"name": "b", "expect": {}, "expect": {}}]}')).toBe(
      'cases[1].expect',
    );
    expect(dup('[[0], [{"k": 1, "k": 1}]]')).toBe('[1][0].k');
    expect(dup('{"allowlist": {"run_command:rm": "Deny", "run_command:rm": "AlwaysThisProject"}}')).toBe(
      'allowlist["run_command:rm"]',
    );
  });

  it('compares keys after unescaping', () => {
    expect(dup('{"deny": 1, "d\\u0065ny": 2}')).toBe('deny');
    expect(dup('{"a\\"b": 1, "a\\u0022b": 2}')).toBe('["a\\"b"]');
  });

  it('does not confuse values, strings holding braces or keys of sibling objects with repeats', () => {
    expect(dup('{"a": "a", "b": "a"}')).toBeUndefined();
    expect(dup('{"a": {"a": {"a": 1}}, "b": {"a": 2}}')).toBeUndefined();
    expect(dup('{"s": "{\\"s\\": 1, \\"s\\": 2}", "t": 1}')).toBeUndefined();
    expect(dup('{"a": [], "b": [{"a": 1}], "c": 1}')).toBeUndefined();
  });

  it('reports syntax errors as such', () => {
    const r = parseStrictJson('{"a": ');
    expect(r.ok).toBe(false);
    expect(!r.ok && r.kind).toBe('syntax');
  });
});
