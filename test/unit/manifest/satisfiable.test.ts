import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { unsatisfiable } from '../../../src/manifest/satisfiable.js';

const ajv = new Ajv({ strict: false, validateSchema: false });

/** Values of every JSON type, as a sample no unsatisfiable schema may accept. */
const SAMPLES: unknown[] = [
  null,
  true,
  false,
  0,
  1,
  2,
  3,
  5,
  -1,
  1.5,
  '',
  'a',
  'abc',
  'é',
  [],
  [1],
  [1, 2, 3],
  {},
  { n: 1 },
  { n: 'x', m: 2 },
];

const NEVER: Array<[string, unknown, RegExp]> = [
  ['false', false, /false/],
  ['not {}', { not: {} }, /not/],
  ['not true', { type: 'object', not: true }, /not/],
  ['not of annotations only', { not: { description: 'anything' } }, /not/],
  ['minimum above maximum', { type: 'number', minimum: 5, maximum: 2 }, /at least 5 and at most 2/],
  ['exclusive bounds that meet', { type: 'number', exclusiveMinimum: 2, maximum: 2 }, /no number/],
  ['an integer between 1.2 and 1.8', { type: 'integer', minimum: 1.2, maximum: 1.8 }, /no integer/],
  ['minLength above maxLength', { type: 'string', minLength: 3, maxLength: 2 }, /minLength 3/],
  ['minItems above maxItems', { type: 'array', minItems: 2, maxItems: 1 }, /minItems 2/],
  [
    'minProperties above maxProperties',
    { type: 'object', minProperties: 2, maxProperties: 1 },
    /minProperties/,
  ],
  ['an empty enum', { enum: [] }, /enum/],
  ['const of another type', { type: 'string', const: 3 }, /const/],
  ['enum of another type', { type: 'object', enum: ['a', 1, null] }, /enum/],
  ['const outside the bounds', { const: 1, minimum: 5 }, /const/],
  ['const not in the enum', { const: 'a', enum: ['b', 'c'] }, /const/],
  ['enum strings all too long', { enum: ['abc', 'abcd'], maxLength: 2 }, /enum/],
  ['allOf of two types', { allOf: [{ type: 'string' }, { type: 'number' }] }, /no JSON type/],
  ['allOf with a never member', { allOf: [{ type: 'object' }, { not: {} }] }, /not/],
  ['anyOf of never members', { anyOf: [{ not: {} }, false] }, /anyOf/],
  ['not of its only type', { type: 'string', not: { type: 'string' } }, /no JSON type/],
  [
    'a required property that can never be valid',
    { type: 'object', properties: { n: { type: 'number', minimum: 5, maximum: 2 } }, required: ['n'] },
    /required property "n"/,
  ],
  [
    'a required property additionalProperties forbids',
    { type: 'object', properties: {}, additionalProperties: false, required: ['n'] },
    /additionalProperties/,
  ],
  [
    'more required than maxProperties',
    { type: 'object', required: ['a', 'b'], maxProperties: 1 },
    /maxProperties/,
  ],
];

/** Each satisfiable neighbour with a document Ajv accepts: proof that refusing it would be wrong. */
const SOMETIMES: Array<[string, unknown, unknown]> = [
  // Ajv reads an empty type list as no constraint at all.
  ['an empty type list', { type: [] }, 'x'],
  ['true', true, 1],
  ['{}', {}, null],
  ['bounds without a type (a string passes)', { minimum: 5, maximum: 2 }, 'x'],
  ['bounds that meet inclusively', { type: 'number', minimum: 2, maximum: 2 }, 2],
  ['an integer between 1 and 1.8', { type: 'integer', minimum: 1, maximum: 1.8 }, 1],
  ['lengths without a type (a number passes)', { minLength: 3, maxLength: 2 }, 7],
  ['equal lengths', { type: 'string', minLength: 2, maxLength: 2 }, 'ab'],
  ['not of a narrower schema', { type: 'number', not: { minimum: 3 } }, 1],
  ['not of one of two types', { type: ['string', 'null'], not: { type: 'string' } }, null],
  ['an optional never property', { type: 'object', properties: { n: { not: {} } } }, {}],
  ['anyOf with one good member', { anyOf: [{ not: {} }, { type: 'string' }] }, 's'],
  ['const that fits', { type: 'integer', const: 3, minimum: 1 }, 3],
  ['an integer const under type number', { type: 'number', const: 4 }, 4],
  ['a multi-byte enum value within maxLength', { enum: ['éé'], maxLength: 2 }, 'éé'],
  [
    'required via patternProperties',
    { properties: {}, patternProperties: { '^n$': {} }, additionalProperties: false, required: ['n'] },
    { n: 1 },
  ],
  ['allOf number and integer', { allOf: [{ type: 'number' }, { type: 'integer' }] }, 2],
];

describe('unsatisfiable', () => {
  it.each(NEVER)('proves %s unsatisfiable', (_name, schema, reason) => {
    const proof = unsatisfiable(schema);
    expect(proof?.reason).toMatch(reason);
    // The proof agrees with a real validator: none of the sample values passes (or Ajv cannot even
    // compile the schema, as with an empty enum).
    let validate: (v: unknown) => boolean;
    try {
      validate = ajv.compile(schema as object);
    } catch {
      return;
    }
    expect(SAMPLES.filter((v) => validate(v))).toEqual([]);
  });

  it.each(SOMETIMES)('claims nothing of %s', (_name, schema, witness) => {
    expect(ajv.compile(schema as object)(witness)).toBe(true);
    expect(unsatisfiable(schema)).toBeUndefined();
  });

  it('says where in the schema the proof lies', () => {
    expect(unsatisfiable({ allOf: [{}, { not: {} }] })?.at).toBe('allOf[1]');
    expect(unsatisfiable({ anyOf: [false, false] })?.reason).toMatch(/anyOf\[0\]: the schema is false/);
  });
});
