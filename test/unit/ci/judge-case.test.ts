import { describe, expect, it } from 'vitest';
import type { CapabilityCase } from '../../../src/cases/cases.js';
import { judgeCase } from '../../../src/ci/judge-case.js';
import { emptyResult, type RunResult } from '../../../src/runners/types.js';

const result = (over: Partial<RunResult>): RunResult => ({ ...emptyResult('shell'), exitCode: 0, ...over });
const check = (expect: Partial<CapabilityCase['expect']>): CapabilityCase => ({
  name: 'c',
  input: {},
  expect: { exitCode: 0, ...expect },
});
const why = (c: CapabilityCase, r: RunResult): string | undefined => judgeCase(c, r)?.message;

describe('judging a case', () => {
  it('judges exact stdout, substrings, JSON structure and exit codes', () => {
    expect(why(check({ stdout: 'a\n' }), result({ stdout: 'a\n' }))).toBeUndefined();
    expect(why(check({ stdout: 'a\n' }), result({ stdout: 'a' }))).toMatch(/expected "a\\n"/);
    expect(why(check({ contains: 'ell' }), result({ stdout: 'hello' }))).toBeUndefined();
    expect(
      why(check({ json: { a: [1, { b: 2 }] } }), result({ stdout: '{"a":[1,{"b":2}]}' })),
    ).toBeUndefined();
    expect(why(check({ json: { a: 1 } }), result({ stdout: '{"a":1,"b":2}' }))).toMatch(/expected/);
    expect(why(check({ json: { a: 1 } }), result({ stdout: 'nope' }))).toMatch(/not JSON/);
    expect(why(check({ stdout: '' }), result({ exitCode: 2, stderr: 'boom' }))).toMatch(
      /exit code 2, expected 0; stderr: boom/,
    );
    expect(why(check({ stdout: '' }), result({ exitCode: null, timedOut: true }))).toMatch(/timed out/);
  });

  it('fails a case whose expected output is missing', () => {
    expect(why(check({}), result({ stdout: 'anything' }))).toMatch(/no expected output/);
  });

  it('fails a run that broke any contract capsule checks, whatever the expect kind, naming it', () => {
    const broken: Array<[Partial<RunResult>, string]> = [
      [{ outputInvalid: 'outputSchema: /n must be number' }, 'outputSchema'],
      [{ timedOut: true, exitCode: null }, 'limits.timeoutMs'],
      [{ truncated: true }, 'limits.outputBytes'],
      [{ oomKilled: true }, 'limits.memoryMb'],
      [{ pidsLimited: true }, 'limits.pids'],
      [{ writeLimited: true }, 'limits.writeBytes'],
      [{ networkDenied: ['GET evil.example:443'] }, 'grants.network'],
      [{ exitCode: 3 }, 'exitCode'],
    ];
    const stdout = '{"n":"one"}';
    for (const expect_ of [{ stdout }, { contains: 'one' }, { json: { n: 'one' } }]) {
      // The control: the same output passes this case when no contract is broken.
      expect(judgeCase(check(expect_), result({ stdout }))).toBeUndefined();
      for (const [over, contract] of broken) {
        const got = judgeCase(check(expect_), result({ stdout, ...over }));
        expect(got?.contract, `${JSON.stringify(expect_)} ${contract}`).toBe(contract);
        expect(got?.message.startsWith(`${contract}: `)).toBe(true);
      }
    }
  });
});
