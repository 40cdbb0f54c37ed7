import { Ajv, type ValidateFunction } from 'ajv';
import { CapsuleError } from '../errors.js';
import type { Capability } from './types.js';

const MAX_INPUT_BYTES = 8 * 1024 * 1024;

/** Validates input documents against a capability's JSON Schema (compiled once per schema). */
export class InputValidator {
  private readonly ajv = new Ajv({ allErrors: true, strict: false });
  private readonly cache = new Map<string, ValidateFunction>();

  /**
   * undefined when the schema is a valid JSON Schema; otherwise the reason. Checked against the
   * meta-schema only (cheap); compiling waits for the first run, so a scan of many capabilities stays fast.
   */
  check(schema: Record<string, unknown>, field = 'inputSchema'): string | undefined {
    try {
      if (this.ajv.validateSchema(schema) === true) return undefined;
      return this.ajv.errorsText(this.ajv.errors, { dataVar: field });
    } catch (err) {
      return (err as Error).message;
    }
  }

  /** Parse input text and validate it; returns the canonical JSON text passed to the capability. */
  validate(capability: Capability, inputText: string): string {
    if (Buffer.byteLength(inputText) > MAX_INPUT_BYTES) {
      throw new CapsuleError('INPUT_INVALID', `Input is larger than ${MAX_INPUT_BYTES} bytes.`);
    }
    let value: unknown;
    try {
      value = JSON.parse(inputText);
    } catch (err) {
      throw new CapsuleError('INPUT_INVALID', `Input is not valid JSON: ${(err as Error).message}`, {
        field: 'input',
        hint: `Pass a JSON document, e.g. --input '{"name":"world"}'.`,
      });
    }
    let validate: ValidateFunction;
    try {
      validate = this.compile(capability.manifest.inputSchema);
    } catch (err) {
      throw new CapsuleError(
        'MANIFEST_INVALID',
        `The inputSchema of "${capability.name}" cannot be compiled: ${(err as Error).message}`,
        {
          file: capability.manifestPath,
          field: 'inputSchema',
        },
      );
    }
    if (!validate(value)) {
      const issues = (validate.errors ?? []).map((e) => ({
        field: `input${e.instancePath.replace(/\//g, '.')}`,
        message: e.message ?? 'is invalid',
      }));
      const first = issues[0];
      throw new CapsuleError(
        'INPUT_INVALID',
        `Input does not match the input schema of "${capability.name}": ${first ? `${first.field} ${first.message}` : 'invalid'}.`,
        {
          file: capability.manifestPath,
          field: 'inputSchema',
          issues,
          hint: `See "capsule show ${capability.name}".`,
        },
      );
    }
    return JSON.stringify(value);
  }

  /**
   * A run's stdout against the capability's outputSchema: the parsed value when it matches, or why
   * not (naming the field). Without an outputSchema there is nothing to check (undefined).
   */
  checkOutput(
    capability: Capability,
    stdout: string,
  ): { ok: true; value: unknown } | { ok: false; message: string } | undefined {
    const schema = capability.manifest.outputSchema;
    if (schema === undefined) return undefined;
    let value: unknown;
    try {
      value = JSON.parse(stdout);
    } catch (err) {
      return {
        ok: false,
        message: `the output of "${capability.name}" is not JSON (${(err as Error).message}), but its manifest declares an outputSchema`,
      };
    }
    let validate: ValidateFunction;
    try {
      validate = this.compile(schema);
    } catch (err) {
      return {
        ok: false,
        message: `the outputSchema of "${capability.name}" cannot be compiled: ${(err as Error).message}`,
      };
    }
    if (validate(value)) return { ok: true, value };
    const fields = (validate.errors ?? []).map(
      (e) => `output${e.instancePath.replace(/\//g, '.')} ${e.message ?? 'is invalid'}`,
    );
    return {
      ok: false,
      message: `the output of "${capability.name}" does not match its outputSchema: ${fields.slice(0, 10).join('; ')}`,
    };
  }

  private compile(schema: Record<string, unknown>): ValidateFunction {
    const key = JSON.stringify(schema);
    let fn = this.cache.get(key);
    if (fn === undefined) {
      fn = this.ajv.compile(schema);
      this.cache.set(key, fn);
    }
    return fn;
  }
}
