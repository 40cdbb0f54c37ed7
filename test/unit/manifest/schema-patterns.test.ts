import { describe, expect, it } from 'vitest';
import { CapsuleError } from '../../../src/base/errors.js';
import { InputValidator } from '../../../src/manifest/input.js';
import { schemaPatternProblem, schemaPatterns } from '../../../src/manifest/schema-patterns.js';
import type { Capability } from '../../../src/manifest/types.js';
import { LinearRegexEngine } from '../../../src/base/linear-regex.js';
import { CATASTROPHIC } from '../../helpers/catastrophic-regex.js';

describe('schemaPatterns finds a pattern wherever a schema holds one', () => {
  // A backreference: the one kind of pattern the linear engine refuses.
  const EVIL = '^(a)\\1$';
  const cases: [string, Record<string, unknown>, string][] = [
    ['pattern', { type: 'string', pattern: EVIL }, 'inputSchema.pattern'],
    [
      'properties',
      { type: 'object', properties: { s: { pattern: EVIL } } },
      'inputSchema.properties.s.pattern',
    ],
    ['patternProperties key', { type: 'object', patternProperties: { [EVIL]: {} } }, 'patternProperties key'],
    [
      '$defs',
      { $defs: { s: { type: 'string', pattern: EVIL } }, properties: { x: { $ref: '#/$defs/s' } } },
      'inputSchema.$defs.s.pattern',
    ],
    ['definitions', { definitions: { s: { pattern: EVIL } } }, 'inputSchema.definitions.s.pattern'],
    [
      'propertyNames',
      { type: 'object', propertyNames: { pattern: EVIL } },
      'inputSchema.propertyNames.pattern',
    ],
    ['items', { type: 'array', items: [{ pattern: EVIL }] }, 'inputSchema.items[0].pattern'],
    ['anyOf', { anyOf: [{ type: 'number' }, { pattern: EVIL }] }, 'inputSchema.anyOf[1].pattern'],
    [
      'a property named like a data keyword',
      { type: 'object', properties: { enum: { type: 'string', pattern: EVIL } } },
      'inputSchema.properties.enum.pattern',
    ],
    [
      'a definition named default',
      { $defs: { default: { pattern: EVIL } } },
      'inputSchema.$defs.default.pattern',
    ],
    [
      'dependencies / if-then-else / not',
      { dependencies: { examples: { pattern: EVIL } } },
      'inputSchema.dependencies.examples.pattern',
    ],
    ['a lookahead', { properties: { s: { pattern: '^(?=a)a$' } } }, 'inputSchema.properties.s.pattern'],
  ];
  const engine = new LinearRegexEngine();
  for (const [what, schema, where] of cases) {
    it(what, () => {
      expect(schemaPatterns(schema, 'inputSchema').map((p) => p.at)).toContain(
        where === 'patternProperties key' ? 'inputSchema.patternProperties key' : where,
      );
      expect(schemaPatternProblem(schema, 'inputSchema', engine)).toContain(where);
    });
  }

  it('inside data keywords too: a $ref such as #/default makes Ajv compile what is there', () => {
    expect(
      schemaPatternProblem(
        { default: { pattern: EVIL }, properties: { s: { $ref: '#/default' } } },
        'inputSchema',
        engine,
      ),
    ).toContain('inputSchema.default.pattern');
    expect(schemaPatternProblem({ enum: [{ pattern: EVIL }] }, 'inputSchema', engine)).toContain(
      'inputSchema.enum[0].pattern',
    );
  });

  it('the input validator refuses the schema (load time), naming the field', async () => {
    const v = new InputValidator();
    expect(await v.check({ type: 'object', properties: { s: { type: 'string', pattern: EVIL } } })).toContain(
      'inputSchema.properties.s.pattern',
    );
    expect(await v.check({ patternProperties: { '^(?!x)': {} } }, 'outputSchema')).toContain(
      'outputSchema.patternProperties key',
    );
    // Patterns a backtracking engine explodes on are fine: they run in linear time.
    expect(
      await v.check({ type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } }),
    ).toBeUndefined();
  });
});

function capabilityWith(
  inputSchema: Record<string, unknown>,
  outputSchema?: Record<string, unknown>,
): Capability {
  return {
    name: 'hostile',
    manifestPath: '/project/capabilities/hostile/capability.json',
    manifest: { inputSchema, outputSchema },
  } as unknown as Capability;
}

/** Where a schema can hold a pattern, and a document that puts `text` there. */
const PLACES: readonly (readonly [string, (p: string) => Record<string, unknown>, (t: string) => unknown])[] =
  [
    [
      'pattern',
      (p) => ({ type: 'object', properties: { s: { type: 'string', pattern: p } } }),
      (t) => ({ s: t }),
    ],
    [
      'patternProperties',
      (p) => ({ type: 'object', patternProperties: { [p]: { type: 'number' } } }),
      (t) => ({ [t]: 'x' }),
    ],
    ['propertyNames', (p) => ({ type: 'object', propertyNames: { pattern: p } }), (t) => ({ [t]: 1 })],
    ['items', (p) => ({ type: 'array', items: { type: 'string', pattern: p } }), (t) => [t, t]],
  ];

describe('a hostile pattern and input through the validator: an answer, never a hang', () => {
  for (const [place, schemaFor, docFor] of PLACES) {
    for (const [pattern, text] of CATASTROPHIC) {
      it(`${place} ${pattern}: input and output are judged`, async () => {
        const v = new InputValidator();
        await v.preload();
        const schema = schemaFor(pattern);
        expect(await v.check(schema)).toBeUndefined();
        const cap = capabilityWith(schema, schema);
        const doc = JSON.stringify(docFor(text));
        // The pattern does not match: the input is refused (patternProperties only constrains the
        // value of a key that matches, so there the document passes).
        if (place === 'patternProperties') expect(v.validate(cap, doc)).toBe(doc);
        else expect(() => v.validate(cap, doc)).toThrow(/does not match the input schema/);
        const out = v.checkOutput(cap, doc);
        expect(out?.ok).toBe(place === 'patternProperties');
      });
    }
  }
});

describe('a schema whose checks multiply is stopped at the deadline', () => {
  // Each level checks the next twice (anyOf over one $ref): 2^40 checks of a number that fails both.
  const defs: Record<string, unknown> = {};
  for (let i = 0; i < 40; i++)
    defs[`l${i}`] = { anyOf: [{ $ref: `#/$defs/l${i + 1}` }, { $ref: `#/$defs/l${i + 1}` }] };
  defs.l40 = { type: 'string' };
  const schema = { $defs: defs, $ref: '#/$defs/l0' };

  it('input: refused with MANIFEST_INVALID naming inputSchema; the validator still works after', async () => {
    const v = new InputValidator({ deadlineMs: 300 });
    expect(await v.check(schema)).toBeUndefined();
    let err: unknown;
    try {
      v.validate(capabilityWith(schema), '1');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CapsuleError);
    expect((err as CapsuleError).code).toBe('MANIFEST_INVALID');
    expect((err as CapsuleError).message).toMatch(/did not finish checking the input within 300 ms/);
    expect((err as CapsuleError).details.field).toBe('inputSchema');
    // The same validator answers the next call (its half-run state was dropped).
    expect(v.validate(capabilityWith(schema), '"s"')).toBe('"s"');
    const small = { type: 'object', properties: { s: { type: 'string', pattern: '^[a-z]+$' } } };
    expect(() => v.validate(capabilityWith(small), '{"s":"A"}')).toThrow(/does not match/);
  });

  it('output: not ok, with the reason', () => {
    const v = new InputValidator({ deadlineMs: 300 });
    const r = v.checkOutput(capabilityWith({}, schema), '1');
    expect(r).toEqual({
      ok: false,
      message: 'the outputSchema of "hostile" did not finish checking the output within 300 ms',
    });
  });
});

describe('checking a schema has the same deadline', () => {
  it('a schema whose patterns take longer than the deadline to compile is refused, saying so', async () => {
    // 80 patterns of 50,000 alternatives each: linear to compile, but about a second here.
    const big = Array.from({ length: 50_000 }, (_, i) => `w${i}`).join('|');
    const properties = Object.fromEntries(
      Array.from({ length: 80 }, (_, i) => [`p${i}`, { type: 'string', pattern: `^(?:${big})$` }]),
    );
    // A schema gets five times the deadline (100 ms): about a tenth of what the compile takes, and far
    // more than the next, small schema needs on a fresh Ajv.
    const v = new InputValidator({ deadlineMs: 20 });
    expect(await v.check({ type: 'object', properties })).toMatch(/checking it took longer than \d+ ms/);
    // The validator still checks the next schema.
    expect(await v.check({ type: 'string', pattern: '^(a+)+$' })).toBeUndefined();
  });
});
