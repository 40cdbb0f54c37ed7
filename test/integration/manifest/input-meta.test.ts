import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../helpers/cli.js';

// The built CLI checks input schemas with the meta-schema validator the build precompiled
// (dist/manifest/input-meta.cjs); it must judge every schema exactly as Ajv itself does.
const DIST_INPUT = path.join(REPO_ROOT, 'dist', 'manifest', 'input.js');

const SCHEMAS: Record<string, unknown>[] = [
  { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
  { type: 12 },
  { type: 'object', properties: { a: { type: 'strnig' } } },
  { required: 'name' },
  { minLength: -1, enum: [] },
  { $schema: 'http://json-schema.org/draft-07/schema#', type: 'string' },
  { $schema: 'http://json-schema.org/draft-07/schema', items: [{ type: 'nope' }] },
  { $schema: 'https://json-schema.org/draft/2020-12/schema' },
  { properties: { a: { $ref: '#/definitions/x' } }, definitions: { x: { type: 'integer' } } },
  { patternProperties: { '^a': { maximum: 'ten' } } },
  // Hostile or odd manifests: a $schema that is not a string, a draft-07 $schema over an invalid body,
  // a schema that refers to the meta-schema itself, an unknown remote meta-schema.
  { $schema: 123 },
  { $schema: 'http://json-schema.org/draft-07/schema#', type: 12 },
  { $ref: 'http://json-schema.org/draft-07/schema#' },
  { $schema: 'https://attacker.example/meta', type: 'object' },
  { allOf: [{ type: 'object' }, { not: { required: 7 } }] },
];

describe('the precompiled input meta-schema (built dist)', () => {
  it('is there: the build wrote it next to input.js', () => {
    expect(existsSync(path.join(REPO_ROOT, 'dist', 'manifest', 'input-meta.cjs'))).toBe(true);
  });

  it('finds the same problems as Ajv for valid, invalid and foreign-draft schemas', async () => {
    const { InputValidator } = (await import(pathToFileURL(DIST_INPUT).href)) as {
      InputValidator: new () => { check(schema: Record<string, unknown>): Promise<string | undefined> };
    };
    const ours = new InputValidator();
    const ajv = new Ajv({ allErrors: true, strict: false });
    const reference = (schema: Record<string, unknown>): string | undefined => {
      try {
        return ajv.validateSchema(schema) === true
          ? undefined
          : ajv.errorsText(ajv.errors, { dataVar: 'inputSchema' });
      } catch (err) {
        return (err as Error).message;
      }
    };
    const verdicts = await Promise.all(SCHEMAS.map((s) => ours.check(s)));
    expect(verdicts).toEqual(SCHEMAS.map(reference));
    // The control: the list holds both kinds, so "the same" is not two empty answers.
    expect(verdicts.filter((v) => v === undefined).length).toBeGreaterThan(1);
    expect(verdicts.filter((v) => v !== undefined).length).toBeGreaterThan(4);
  });

  it('refuses to compile an invalid schema at run time, and validates input with a valid one', async () => {
    const { InputValidator } = (await import(pathToFileURL(DIST_INPUT).href)) as {
      InputValidator: new () => { validate(capability: unknown, input: string): string };
    };
    const v = new InputValidator();
    const cap = (inputSchema: Record<string, unknown>): unknown => ({
      name: 'probe',
      manifestPath: '/x/capability.json',
      manifest: { inputSchema },
    });
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
    expect(v.validate(cap(schema), '{"n":1}')).toBe('{"n":1}');
    expect(() => v.validate(cap(schema), '{"n":"one"}')).toThrow(/input\.n must be integer/);
    expect(() => v.validate(cap({ type: 12 }), '{}')).toThrow(
      /cannot be compiled: inputSchema is not a valid JSON Schema/,
    );
    // The wrapped error is a CapsuleError naming the field, never a plain Error.
    try {
      v.validate(cap({ type: 12 }), '{}');
    } catch (err) {
      expect((err as Error).cause).toMatchObject({
        code: 'MANIFEST_INVALID',
        details: { field: 'inputSchema' },
      });
    }
    // A foreign $schema is not judged by the precompiled validator: refused, never compiled unchecked.
    expect(() => v.validate(cap({ $schema: 'https://attacker.example/meta', type: 'object' }), '{}')).toThrow(
      /cannot be compiled/,
    );
    // A schema built on the meta-schema still validates input (Ajv compiles the meta-schema on demand).
    expect(v.validate(cap({ $ref: 'http://json-schema.org/draft-07/schema#' }), '{"type":"string"}')).toBe(
      '{"type":"string"}',
    );
    expect(() => v.validate(cap({ $ref: 'http://json-schema.org/draft-07/schema#' }), '{"type":12}')).toThrow(
      /Input does not match/,
    );
  });
});
