import { createRequire } from 'node:module';
import { Script, createContext, type Context } from 'node:vm';
import type { Ajv, Options, ValidateFunction } from 'ajv';
import { CapsuleError } from '../base/errors.js';
import { parseJsonText } from '../base/json-text.js';
import { LinearRegexEngine } from '../base/linear-regex.js';
import { schemaPatternProblem, schemaPatterns } from './schema-patterns.js';
import { boundedCheck, schemaWork, type SchemaWork } from './schema-work.js';
import type { Capability } from './types.js';

const MAX_INPUT_BYTES = 8 * 1024 * 1024;

/**
 * How deep a document (input or output) may nest. Validating and serializing recurse; a document nested
 * deeper than the stack allows would otherwise crash capsule, not fail the call.
 */
export const MAX_JSON_DEPTH = 1000;

/** Pure, iterative: whether `value` nests objects/arrays more than `max` levels deep. */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop() as [unknown, number];
    if (v === null || typeof v !== 'object') continue;
    if (depth > max) return true;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return false;
}

/**
 * A parsed input document as the text a capability is given. Refuses (INPUT_INVALID) a document nested
 * deeper than MAX_JSON_DEPTH, which would otherwise overflow the stack of JSON.stringify.
 */
export function inputDocumentText(value: unknown): string {
  refuseDeepInput(value);
  return JSON.stringify(value);
}

/** INPUT_INVALID for an input document nested deeper than MAX_JSON_DEPTH. */
function refuseDeepInput(value: unknown): void {
  if (nestsDeeperThan(value, MAX_JSON_DEPTH)) {
    throw new CapsuleError('INPUT_INVALID', `Input nests deeper than ${MAX_JSON_DEPTH} levels.`, {
      field: 'input',
      hint: 'Flatten the document.',
    });
  }
}

/**
 * How long one schema check may hold capsule's thread: 1 s, plus 0.5 s per MiB of the document checked
 * (up to the 8 MiB an input may have: 5 s), and the most of that for reading or compiling a schema.
 * Patterns match in linear time, but a schema's own structure can still multiply the work (nested
 * `anyOf` over shared `$ref`s doubles it per level), and while a check runs capsule answers nothing
 * else: no MCP request, no signal. Past it the check is stopped and the call refused (docs/manifest.md,
 * "Checks have a deadline"). A typical check takes microseconds; 8 MiB here took 0.25–1 s.
 */
export const SCHEMA_CHECK_DEADLINE_MS = 1000;

/**
 * The deadline for checking a document of `bytes`: the base for a small one, five times it for the
 * largest input (so 0.5 s more per MiB with the default base). A schema's own checks get the most.
 */
function deadlineFor(baseMs: number, bytes: number): number {
  return Math.round(baseMs * (1 + (4 * Math.min(bytes, MAX_INPUT_BYTES)) / MAX_INPUT_BYTES));
}

/** A compiled schema and what its checks can cost. */
interface Compiled {
  readonly validate: ValidateFunction;
  readonly work: SchemaWork | undefined;
}

/** A check that passed its deadline (deadlineFor): its work was stopped. */
class PastDeadline {
  constructor(readonly ms: number) {}
}

/**
 * Runs `fn` on this thread, stopped by V8 if it runs past `ms` (node:vm's timeout terminates the
 * whole running script, whatever it calls, and no try/catch inside can keep it going).
 */
class Deadline {
  readonly #script = new Script('run()');
  readonly #context: Context = createContext({ run: undefined });

  run<T>(ms: number, fn: () => T): T | PastDeadline {
    this.#context.run = fn;
    try {
      return this.#script.runInContext(this.#context, { timeout: ms }) as T;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') return new PastDeadline(ms);
      throw err;
    } finally {
      this.#context.run = undefined;
    }
  }
}

/** Runs a compiled validator; a schema that recurses without end (`$ref` loops) is an answer, not a crash. */
function runValidator(validate: ValidateFunction, value: unknown): boolean | Error {
  try {
    return validate(value) === true;
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}

/** The options every input schema is compiled with; the build compiles the meta-schema with them too. */
export const INPUT_AJV_OPTIONS: Readonly<Options> = Object.freeze({ allErrors: true, strict: false });

/** Ajv's default meta-schema (draft-07): schemas without `$schema` are checked against it. */
export const DRAFT_07_META = 'http://json-schema.org/draft-07/schema';

const require = createRequire(import.meta.url);

/**
 * The draft-07 meta-schema validator, compiled ahead by the build (scripts/build-input-meta.mjs writes
 * dist/manifest/input-meta.cjs with Ajv's standalone code, from INPUT_AJV_OPTIONS): compiling the
 * meta-schema is most of what Ajv costs a command that reads one manifest. Absent when capsule runs
 * from its sources; then Ajv compiles it, as it would anyway.
 */
function precompiledMeta(): ValidateFunction | undefined {
  try {
    const m = require('./input-meta.cjs') as ValidateFunction & { default?: ValidateFunction };
    return typeof m.default === 'function' ? m.default : typeof m === 'function' ? m : undefined;
  } catch {
    return undefined;
  }
}

export interface InputValidatorOptions {
  /** How long one check of a small document may run (default SCHEMA_CHECK_DEADLINE_MS; more for larger ones). */
  deadlineMs?: number;
}

/** Validates input documents against a capability's JSON Schema (compiled once per schema). */
export class InputValidator {
  #ajv: Ajv | undefined;
  #ajvClass: typeof Ajv | undefined;
  #meta: ValidateFunction | null | undefined;
  readonly #regex = new LinearRegexEngine();
  readonly #deadline = new Deadline();
  readonly #deadlineMs: number;
  private readonly cache = new Map<string, Compiled>();

  constructor(options: InputValidatorOptions = {}) {
    this.#deadlineMs = options.deadlineMs ?? SCHEMA_CHECK_DEADLINE_MS;
  }

  /**
   * Loads Ajv, and the pattern engine when one of `schemas` holds a pattern, ahead of a `validate` that
   * will need them (the executor does, while it stages a call). Imports, so the built CLI carries both
   * in its bundle; the synchronous fallbacks read node_modules.
   */
  async preload(schemas: readonly unknown[] = []): Promise<void> {
    this.#ajvClass ??= (await import('ajv')).Ajv;
    if (schemas.some((s) => schemaPatterns(s, '').length > 0)) await this.#regex.load();
  }

  /** Loaded on first need (ajv is CommonJS, so this stays synchronous): a check with the precompiled meta-schema needs none. */
  private get ajv(): Ajv {
    if (this.#ajv === undefined) {
      const AjvClass = this.#ajvClass ?? (require('ajv') as { Ajv: typeof Ajv }).Ajv;
      const regex = this.#regex;
      // Every `pattern` and `patternProperties` key runs on the linear-time engine, never on V8's
      // backtracking one. Ajv shares compiled patterns by their toString(), so it names the source.
      const regExp = Object.assign(
        (source: string): { test(text: string): boolean; toString(): string } => {
          const r = regex.compile(source);
          if (!r.ok) throw new Error(`the pattern ${JSON.stringify(source)} is refused: ${r.reason}`);
          return { test: (text) => r.regex.test(text), toString: () => `linear:${JSON.stringify(source)}` };
        },
        { code: 'capsule-linear-regexp' },
      );
      // Schemas are checked against their meta-schema (schemaProblem) before they are compiled.
      this.#ajv = new AjvClass({ ...INPUT_AJV_OPTIONS, validateSchema: false, code: { regExp } });
    }
    return this.#ajv;
  }

  /**
   * After a check was stopped mid-way, nothing it may have left half-built is used again: a fresh Ajv
   * and fresh compiled validators.
   */
  #forgetCompiled(): void {
    this.#ajv = undefined;
    this.cache.clear();
    this.#regex.forget();
  }

  /** The precompiled validator when it applies to `schema` (no `$schema`, or draft-07's). */
  private metaFor(schema: Record<string, unknown>): ValidateFunction | undefined {
    if (this.#meta === undefined) this.#meta = precompiledMeta() ?? null;
    const declared = schema.$schema;
    const draft07 = declared === undefined || declared === DRAFT_07_META || declared === `${DRAFT_07_META}#`;
    return draft07 && this.#meta !== null ? this.#meta : undefined;
  }

  /** Why `schema` is not a valid JSON Schema for its meta-schema, or undefined when it is. */
  private schemaProblem(schema: Record<string, unknown>, field: string): string | undefined {
    const meta = this.metaFor(schema);
    if (meta !== undefined) {
      if (meta(schema) !== true) return this.ajv.errorsText(meta.errors, { dataVar: field });
    } else if (this.ajv.validateSchema(schema) !== true) {
      return this.ajv.errorsText(this.ajv.errors, { dataVar: field });
    }
    // Every pattern must compile on the linear-time engine Ajv is given.
    return schemaPatternProblem(schema, field, this.#regex);
  }

  /**
   * undefined when the schema is a valid JSON Schema whose patterns capsule can run; otherwise the
   * reason. Checked against the meta-schema and the pattern engine only (cheap); compiling waits for
   * the first run, so a scan of many capabilities stays fast. The pattern engine is loaded only for a
   * schema that holds a pattern.
   */
  async check(schema: Record<string, unknown>, field = 'inputSchema'): Promise<string | undefined> {
    try {
      if (schemaPatterns(schema, field).length === 0) return this.schemaProblem(schema, field);
      await this.#regex.load();
      // Compiling patterns is linear in their length, but a manifest can hold megabytes of them. (The
      // meta-schema check alone is linear in the schema and needs no deadline: a scan pays nothing.)
      const problem = this.#deadline.run(deadlineFor(this.#deadlineMs, MAX_INPUT_BYTES), () =>
        this.schemaProblem(schema, field),
      );
      if (problem instanceof PastDeadline) {
        this.#forgetCompiled();
        return `checking it took longer than ${problem.ms} ms (capsule refuses a schema it cannot check in that time)`;
      }
      return problem;
    } catch (err) {
      return (err as Error).message;
    }
  }

  /** Parse input text and validate it; returns the canonical JSON text passed to the capability. */
  validate(capability: Capability, inputText: string): string {
    if (Buffer.byteLength(inputText) > MAX_INPUT_BYTES) {
      throw new CapsuleError('INPUT_INVALID', `Input is larger than ${MAX_INPUT_BYTES} bytes.`);
    }
    const value = parseJsonText(
      inputText,
      (reason, cause) =>
        new CapsuleError(
          'INPUT_INVALID',
          `Input is not valid JSON: ${reason}`,
          { field: 'input', hint: `Pass a JSON document, e.g. --input '{"name":"world"}'.` },
          cause,
        ),
    );
    refuseDeepInput(value);
    let compiled: Compiled;
    try {
      compiled = this.compile(capability.manifest.inputSchema, 'inputSchema');
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
    const { validate } = compiled;
    const verdict = this.#check(compiled, value, Buffer.byteLength(inputText));
    if (verdict instanceof PastDeadline) {
      this.#forgetCompiled();
      throw new CapsuleError(
        'MANIFEST_INVALID',
        `The inputSchema of "${capability.name}" did not finish checking the input within ${verdict.ms} ms; the call is refused.`,
        {
          file: capability.manifestPath,
          field: 'inputSchema',
          hint: 'A schema whose checks multiply (nested anyOf/oneOf over shared $refs) can take this long: simplify it, or send a smaller input.',
        },
      );
    }
    if (verdict instanceof Error) {
      throw new CapsuleError(
        'MANIFEST_INVALID',
        `The inputSchema of "${capability.name}" cannot check the input: ${verdict.message} (a $ref that loops?)`,
        { file: capability.manifestPath, field: 'inputSchema' },
        { cause: verdict },
      );
    }
    if (!verdict) {
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
    if (nestsDeeperThan(value, MAX_JSON_DEPTH)) {
      return {
        ok: false,
        message: `the output of "${capability.name}" nests deeper than ${MAX_JSON_DEPTH} levels`,
      };
    }
    let compiled: Compiled;
    try {
      compiled = this.compile(schema, 'outputSchema');
    } catch (err) {
      return {
        ok: false,
        message: `the outputSchema of "${capability.name}" cannot be compiled: ${(err as Error).message}`,
      };
    }
    const { validate } = compiled;
    const verdict = this.#check(compiled, value, Buffer.byteLength(stdout));
    if (verdict instanceof PastDeadline) {
      this.#forgetCompiled();
      return {
        ok: false,
        message: `the outputSchema of "${capability.name}" did not finish checking the output within ${verdict.ms} ms`,
      };
    }
    if (verdict instanceof Error) {
      return {
        ok: false,
        message: `the outputSchema of "${capability.name}" cannot check the output: ${verdict.message} (a $ref that loops?)`,
      };
    }
    if (verdict) return { ok: true, value };
    const fields = (validate.errors ?? []).map(
      (e) => `output${e.instancePath.replace(/\//g, '.')} ${e.message ?? 'is invalid'}`,
    );
    return {
      ok: false,
      message: `the output of "${capability.name}" does not match its outputSchema: ${fields.slice(0, 10).join('; ')}`,
    };
  }

  /**
   * A document of `bytes` against a compiled schema: under the deadline, unless the schema's work bound
   * (schema-work.ts) proves the check short — its watchdog thread costs more than such a check.
   */
  #check(compiled: Compiled, value: unknown, bytes: number): boolean | Error | PastDeadline {
    if (boundedCheck(compiled.work, bytes)) return runValidator(compiled.validate, value);
    return this.#deadline.run(deadlineFor(this.#deadlineMs, bytes), () =>
      runValidator(compiled.validate, value),
    );
  }

  /**
   * The work bound of a compiled schema (schema-work.ts), its patterns sized by their compiled programs;
   * undefined (always the deadline) where one of them has no program here.
   */
  #work(schema: Record<string, unknown>, text: string, field: string): SchemaWork | undefined {
    let patternSteps = 0;
    for (const p of schemaPatterns(schema, field)) {
      const r = this.#regex.compile(p.source);
      if (!r.ok) return undefined;
      patternSteps += r.regex.steps;
    }
    return schemaWork(schema, text, patternSteps);
  }

  private compile(schema: Record<string, unknown>, field: string): Compiled {
    const key = JSON.stringify(schema);
    let fn = this.cache.get(key);
    if (fn === undefined) {
      const problem = this.schemaProblem(schema, field);
      if (problem !== undefined)
        throw new CapsuleError('MANIFEST_INVALID', `${field} is not a valid JSON Schema: ${problem}`, {
          field,
          hint: 'Fix the schema in capsule.json (see docs/manifest.md).',
        });
      const ajv = this.ajv;
      const compiled = this.#deadline.run(deadlineFor(this.#deadlineMs, MAX_INPUT_BYTES), () =>
        ajv.compile(schema),
      );
      if (compiled instanceof PastDeadline) {
        this.#forgetCompiled();
        throw new Error(`compiling it took longer than ${compiled.ms} ms`);
      }
      fn = { validate: compiled, work: this.#work(schema, key, field) };
      this.cache.set(key, fn);
    }
    return fn;
  }
}
