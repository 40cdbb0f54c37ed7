import { describe, expect, it } from 'vitest';
import { InputValidator } from '../../../src/manifest/input.js';
import { regexHazard, schemaRegexProblem } from '../../../src/manifest/regex-safety.js';

/** The patterns capsule refuses in a schema (docs/manifest.md, "Patterns in schemas"). */
describe('regexHazard', () => {
  const refused = [
    '^(a+)+$',
    '^(a*)*$',
    '^(a{1,})+$',
    '^(?:a{1,}){1,}$',
    '^(a?){25}a{25}$',
    '^(a+){2,5}$',
    '^(a|a)*$',
    '^(a|aa)+$',
    '^((a|a)b)*$',
    '^(\\d|x)+$',
    '^([a-z]+\\.)+com$',
    '^(\\w+\\s?)*$',
    '^(a)\\1$',
    '^(?<x>a)\\k<x>$',
    '^(?=(a+)+b)',
    '^(?!a*b)',
    '(?<=a+)b',
    '^(.*a){12}$',
    '^(a+)+?$',
  ];
  for (const p of refused) {
    it(`refuses ${p}`, () => {
      expect(regexHazard(p)).toMatch(/backtrack catastrophically/);
    });
  }

  const allowed = [
    '^[a-z][a-z0-9-]*$',
    '^\\d{4}-\\d{2}-\\d{2}$',
    '^(foo|bar)+$',
    '^(?:https?://)?example\\.test$',
    '^a+$',
    '^(ab)+$',
    '^[(+*)]+$',
    '^\\(a+\\)+$',
    '^\\u{1F600}+$',
    '^(?:\\x61|b)*$',
    '^(?=a)abc',
    '',
  ];
  for (const p of allowed) {
    it(`allows ${JSON.stringify(p)}`, () => {
      expect(regexHazard(p)).toBeUndefined();
    });
  }

  it('an escaped literal is the same character as itself: (a|\\x61)* is refused', () => {
    expect(regexHazard('^(a|\\x61)*$')).toMatch(/alternatives/);
  });

  it('refuses what is not a regular expression in u mode', () => {
    expect(regexHazard('(a')).toMatch(/not a valid regular expression/);
    expect(regexHazard('a{2')).toMatch(/not a valid regular expression/);
  });
});

describe('schemaRegexProblem finds a pattern wherever a schema holds one', () => {
  const EVIL = '^(a+)+$';
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
    ['nested {1,}', { properties: { s: { pattern: '^(a{1,}){1,}$' } } }, 'inputSchema.properties.s.pattern'],
  ];
  for (const [what, schema, where] of cases) {
    it(what, () => {
      expect(schemaRegexProblem(schema, 'inputSchema')).toContain(where);
    });
  }

  it('inside data keywords too: a $ref such as #/default makes Ajv compile what is there', () => {
    expect(
      schemaRegexProblem(
        { default: { pattern: EVIL }, properties: { s: { $ref: '#/default' } } },
        'inputSchema',
      ),
    ).toContain('inputSchema.default.pattern');
    expect(schemaRegexProblem({ enum: [{ pattern: EVIL }] }, 'inputSchema')).toContain(
      'inputSchema.enum[0].pattern',
    );
  });

  it('the input validator refuses the schema (load time), naming the field', () => {
    const v = new InputValidator();
    expect(v.check({ type: 'object', properties: { s: { type: 'string', pattern: EVIL } } })).toContain(
      'inputSchema.properties.s.pattern',
    );
    expect(v.check({ patternProperties: { '^(a|a)*$': {} } }, 'outputSchema')).toContain(
      'outputSchema.patternProperties key',
    );
    expect(
      v.check({ type: 'object', properties: { s: { type: 'string', pattern: '^[a-z]+$' } } }),
    ).toBeUndefined();
  });
});
