import { describe, expect, it } from 'vitest';
import { inputDocumentText, MAX_JSON_DEPTH, nestsDeeperThan } from '../../../src/manifest/input.js';

/** `depth` nested arrays, built without recursion. */
function nested(depth: number): unknown {
  let v: unknown = [];
  for (let i = 1; i < depth; i += 1) v = [v];
  return v;
}

describe('document depth (pure)', () => {
  it('counts objects and arrays, not scalars', () => {
    expect(nestsDeeperThan(1, 0)).toBe(false);
    expect(nestsDeeperThan({}, 1)).toBe(false);
    expect(nestsDeeperThan({ a: [1] }, 1)).toBe(true);
    expect(nestsDeeperThan({ a: [1] }, 2)).toBe(false);
  });

  it('the limit itself passes, one more level does not, and far deeper does not overflow', () => {
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH)).toBe(false);
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)).toBe(true);
    expect(nestsDeeperThan(nested(500_000), MAX_JSON_DEPTH)).toBe(true);
  });

  it('inputDocumentText refuses a too-deep document with INPUT_INVALID naming the input', () => {
    expect(inputDocumentText({ a: 1 })).toBe('{"a":1}');
    expect(() => inputDocumentText(nested(500_000))).toThrow(
      expect.objectContaining({
        code: 'INPUT_INVALID',
        details: expect.objectContaining({ field: 'input' }),
      }),
    );
  });
});
