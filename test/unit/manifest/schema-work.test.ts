import { describe, expect, it } from 'vitest';
import { BOUNDED_CHECK_STEPS, boundedCheck, schemaWork } from '../../../src/manifest/schema-work.js';

const workOf = (schema: Record<string, unknown>) => schemaWork(schema, JSON.stringify(schema), 0);

describe('schemaWork', () => {
  it('a reference anywhere leaves the check unbounded', () => {
    expect(workOf({ properties: { a: { $ref: '#/$defs/x' } }, $defs: { x: {} } })).toBeUndefined();
    expect(workOf({ anyOf: [{ items: [{ $dynamicRef: '#x' }] }] })).toBeUndefined();
    expect(workOf({ $recursiveRef: '#' })).toBeUndefined();
    // A property named $ref is counted too: over-counting only costs a deadline.
    expect(workOf({ properties: { $ref: { type: 'string' } } })).toBeUndefined();
  });

  it('a tree is sized by its text and says whether it compares items', () => {
    const schema = { type: 'object', properties: { a: { type: 'array', uniqueItems: true } } };
    expect(workOf(schema)).toEqual({ bytes: JSON.stringify(schema).length, comparesItems: true });
    expect(workOf({ type: 'object' })).toEqual({ bytes: 17, comparesItems: false });
  });

  it("a pattern weighs its compiled program's instructions, not its text", () => {
    const schema = { pattern: '(?:a?){1000}' };
    const text = JSON.stringify(schema);
    expect(schemaWork(schema, text, 3001)).toEqual({ bytes: text.length + 3001, comparesItems: false });
  });
});

describe('boundedCheck', () => {
  it('small schema × small document: bounded; either one large: not', () => {
    const small = { bytes: 100, comparesItems: false };
    expect(boundedCheck(small, 600)).toBe(true);
    expect(boundedCheck(small, 0)).toBe(true);
    expect(boundedCheck(small, BOUNDED_CHECK_STEPS / 100 + 1)).toBe(false);
    expect(boundedCheck({ bytes: BOUNDED_CHECK_STEPS, comparesItems: false }, 2)).toBe(false);
    // 2^20 steps of Ajv's work are 60–130 ms (errors under allErrors, RE2 threads): far from short.
    expect(boundedCheck({ bytes: 1024, comparesItems: false }, 1024)).toBe(false);
  });

  it('comparing items bounds the document by its square', () => {
    const compares = { bytes: 10, comparesItems: true };
    expect(boundedCheck(compares, 256)).toBe(true);
    expect(boundedCheck(compares, 257)).toBe(false);
  });

  it('no bound without a work estimate', () => {
    expect(boundedCheck(undefined, 1)).toBe(false);
  });
});
