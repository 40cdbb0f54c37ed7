import { isDeepStrictEqual } from 'node:util';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { parseStrictJson } from '../config/strict-json.js';
import { CapsuleError } from '../errors.js';
import { zodIssues } from '../manifest/parse.js';
import type { Capability } from '../manifest/types.js';
import type { RunResult } from '../runners/types.js';

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

export type CheckCase = z.infer<typeof caseSchema>;

/** Pure: parse cases.json text. */
export function parseCases(text: string, file: string): CheckCase[] {
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
    const issues = zodIssues(parsed.error, json.value).map((i) => ({
      file,
      field: i.field,
      message: i.message,
    }));
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
export async function loadCases(capability: Capability): Promise<CheckCase[] | undefined> {
  const file = path.join(capability.dir, CASES_FILE);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new CapsuleError(
      'MANIFEST_INVALID',
      `${file} cannot be read: ${(err as NodeJS.ErrnoException).code ?? 'error'}`,
      { file },
      { cause: err },
    );
  }
  return parseCases(text, file);
}

/** Pure: why a run does not meet a case's expectation, or undefined when it passes. */
export function judgeCase(check: CheckCase, result: RunResult): string | undefined {
  const { expect } = check;
  if (expect.stdout === undefined && expect.json === undefined && expect.contains === undefined) {
    return 'the case has no expected output: set expect.stdout, expect.json or expect.contains';
  }
  if (result.timedOut) return `timed out (${result.durationMs.toFixed(0)} ms)`;
  if (result.truncated) return 'output passed limits.outputBytes and was cut';
  if (result.oomKilled) return 'hit the memory limit';
  if (result.exitCode !== expect.exitCode) {
    return `exit code ${result.exitCode ?? `signal ${result.signal ?? '?'}`}, expected ${expect.exitCode}${result.stderr ? `; stderr: ${result.stderr.slice(0, 500)}` : ''}`;
  }
  if (expect.stdout !== undefined && result.stdout !== expect.stdout) {
    return `stdout ${JSON.stringify(result.stdout.slice(0, 500))}, expected ${JSON.stringify(expect.stdout)}`;
  }
  if (expect.contains !== undefined && !result.stdout.includes(expect.contains)) {
    return `stdout does not contain ${JSON.stringify(expect.contains)}: ${JSON.stringify(result.stdout.slice(0, 500))}`;
  }
  if (expect.json !== undefined) {
    let actual: unknown;
    try {
      actual = JSON.parse(result.stdout);
    } catch {
      return `stdout is not JSON: ${JSON.stringify(result.stdout.slice(0, 500))}`;
    }
    if (!isDeepStrictEqual(actual, expect.json))
      return `stdout JSON ${JSON.stringify(actual).slice(0, 500)}, expected ${JSON.stringify(expect.json)}`;
  }
  return undefined;
}
