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

/**
 * Which contract a case broke: the case's own `expect.*`, or one capsule checks on every run — a limit
 * (`limits.*`), the manifest's `outputSchema`, its `grants.network` (a request was refused), the exit
 * code. The JUnit report names it (the failure's `type`).
 */
export type CaseContract =
  | 'cases.json'
  | 'limits.timeoutMs'
  | 'limits.outputBytes'
  | 'limits.memoryMb'
  | 'limits.pids'
  | 'limits.writeBytes'
  | 'canceled'
  | 'grants.network'
  | 'exitCode'
  | 'outputSchema'
  | 'expect.stdout'
  | 'expect.contains'
  | 'expect.json';

export interface CaseFailure {
  contract: CaseContract;
  message: string;
}

const fail = (contract: CaseContract, why: string): CaseFailure => ({
  contract,
  message: `${contract}: ${why}`,
});

/**
 * Pure: the first contract a run breaks, or undefined when it passes. Every contract `capsule run`
 * enforces counts, not only the case's `expect`: a run that hit a limit, had a request refused, or
 * printed output its outputSchema rejects fails whatever its stdout shows.
 */
export function judgeCase(check: CheckCase, result: RunResult): CaseFailure | undefined {
  const { expect } = check;
  if (expect.stdout === undefined && expect.json === undefined && expect.contains === undefined) {
    return fail(
      'cases.json',
      'the case has no expected output: set expect.stdout, expect.json or expect.contains',
    );
  }
  if (result.timedOut) return fail('limits.timeoutMs', `timed out (${result.durationMs.toFixed(0)} ms)`);
  if (result.truncated) return fail('limits.outputBytes', 'output passed limits.outputBytes and was cut');
  if (result.oomKilled) return fail('limits.memoryMb', 'hit the memory limit');
  if (result.pidsLimited === true) return fail('limits.pids', 'hit the process limit and was stopped');
  if (result.writeLimited === true)
    return fail('limits.writeBytes', 'hit the write limit: writes to its folders failed with "no space"');
  if (result.canceled) return fail('canceled', 'the run was canceled');
  if (result.networkDenied !== undefined && result.networkDenied.length > 0) {
    const [first, ...more] = result.networkDenied;
    return fail(
      'grants.network',
      `the egress policy refused ${first ?? ''}${more.length > 0 ? ` and ${more.length} more` : ''} (not in grants.network)`,
    );
  }
  if (result.exitCode !== expect.exitCode) {
    return fail(
      'exitCode',
      `exit code ${result.exitCode ?? `signal ${result.signal ?? '?'}`}, expected ${expect.exitCode}${result.stderr ? `; stderr: ${result.stderr.slice(0, 500)}` : ''}`,
    );
  }
  if (result.outputInvalid !== undefined) return fail('outputSchema', result.outputInvalid);
  if (expect.stdout !== undefined && result.stdout !== expect.stdout) {
    return fail(
      'expect.stdout',
      `stdout ${JSON.stringify(result.stdout.slice(0, 500))}, expected ${JSON.stringify(expect.stdout)}`,
    );
  }
  if (expect.contains !== undefined && !result.stdout.includes(expect.contains)) {
    return fail(
      'expect.contains',
      `stdout does not contain ${JSON.stringify(expect.contains)}: ${JSON.stringify(result.stdout.slice(0, 500))}`,
    );
  }
  if (expect.json !== undefined) {
    let actual: unknown;
    try {
      actual = JSON.parse(result.stdout);
    } catch {
      return fail('expect.json', `stdout is not JSON: ${JSON.stringify(result.stdout.slice(0, 500))}`);
    }
    if (!isDeepStrictEqual(actual, expect.json))
      return fail(
        'expect.json',
        `stdout JSON ${JSON.stringify(actual).slice(0, 500)}, expected ${JSON.stringify(expect.json)}`,
      );
  }
  return undefined;
}
