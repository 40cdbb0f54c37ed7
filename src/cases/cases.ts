import path from 'node:path';
import { z } from 'zod';
import { parseStrictJson } from '../base/strict-json.js';
import { CapsuleError } from '../base/errors.js';
import { readOptionalFile } from '../base/optional-file.js';
import { fileIssues } from '../base/zod-issues.js';
import type { Capability } from '../manifest/types.js';

/** Checks live beside the manifest; they are not run code, so they are not part of the content hash. */
export const CASES_FILE = 'cases.json';

export const caseSchema = z
  .strictObject({
    name: z.string().min(1).max(200).describe('Test case name (JUnit testcase name).'),
    input: z.unknown().default({}).describe('Input document passed to the capability.'),
    expect: z
      .strictObject({
        exitCode: z.int().default(0).describe('Expected exit code.'),
        stdout: z.string().optional().describe('Exact expected stdout.'),
        json: z.unknown().optional().describe('Expected stdout, parsed as JSON and compared structurally.'),
        contains: z.string().optional().describe('A substring stdout must contain.'),
      })
      .describe('What a passing run looks like. At least one of stdout, json or contains is required.'),
  })
  .describe('One check: an input and its expected output.');

export const casesFileSchema = z
  .strictObject({
    schemaVersion: z.literal(1).describe('cases.json format version. Currently 1.'),
    cases: z.array(caseSchema).min(1).max(1000).describe('The checks, run in order.'),
  })
  .describe('cases.json: example input/expected-output checks beside capability.json, run by `capsule ci`.');

export type CapabilityCase = z.infer<typeof caseSchema>;

/** Pure: parse cases.json text. */
export function parseCases(text: string, file: string): CapabilityCase[] {
  const json = parseStrictJson(text);
  if (!json.ok) {
    const message =
      json.kind === 'duplicate-key'
        ? `${file}: ${json.message}`
        : `${file} is not valid JSON: ${json.message}`;
    throw new CapsuleError('MANIFEST_INVALID', message, { file, field: json.field });
  }
  const parsed = casesFileSchema.safeParse(json.value);
  if (!parsed.success) {
    const issues = fileIssues(parsed.error, json.value, file);
    throw new CapsuleError(
      'MANIFEST_INVALID',
      `${file}: ${issues[0]?.field ?? '(top level)'} ${issues[0]?.message ?? ''}`,
      {
        file,
        field: issues[0]?.field,
        issues,
      },
    );
  }
  return parsed.data.cases;
}

/** The capability's cases, or undefined when it has no cases.json. */
export async function loadCases(capability: Capability): Promise<CapabilityCase[] | undefined> {
  const file = path.join(capability.dir, CASES_FILE);
  const text = await readOptionalFile(
    file,
    'utf8',
    (err) =>
      new CapsuleError(
        'MANIFEST_INVALID',
        `${file} cannot be read: ${err.code ?? 'error'}`,
        { file },
        { cause: err },
      ),
  );
  if (text === undefined) return undefined;
  return parseCases(text, file);
}
