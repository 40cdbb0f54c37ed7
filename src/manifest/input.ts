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
  check(schema: Record<string, unknown>): string | undefined {
    try {
      if (this.ajv.validateSchema(schema) === true) return undefined;
      return this.ajv.errorsText(this.ajv.errors, { dataVar: 'inputSchema' });
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
      throw new CapsuleError(
        'INPUT_INVALID',
        `Input is not valid JSON: ${(err as Error).message}`,
        {
          field: 'input',
          hint: `Pass a JSON document, e.g. --input '{"name":"world"}'.`,
        },
        { cause: err },
      );
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
        { cause: err },
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
