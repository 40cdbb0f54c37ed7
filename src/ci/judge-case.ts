import { isDeepStrictEqual } from 'node:util';
import type { CapabilityCase } from '../cases/cases.js';
import type { RunResult } from '../runners/types.js';

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
export function judgeCase(check: CapabilityCase, result: RunResult): CaseFailure | undefined {
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
