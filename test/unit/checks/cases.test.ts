import { describe, expect, it } from 'vitest';
import { judgeCase, parseCases, type CheckCase } from '../../../src/checks/cases.js';
import { emptyResult, type RunResult } from '../../../src/runners/types.js';

const result = (over: Partial<RunResult>): RunResult => ({ ...emptyResult('shell'), exitCode: 0, ...over });
const check = (expect: Partial<CheckCase['expect']>): CheckCase => ({
  name: 'c',
  input: {},
  expect: { exitCode: 0, ...expect },
});

describe('cases', () => {
  it('parses a cases file and names the bad field', () => {
    expect(
      parseCases('{"schemaVersion":1,"cases":[{"name":"a","expect":{"stdout":"x"}}]}', 'f.json')[0]?.input,
    ).toEqual({});
    expect(() =>
      parseCases('{"schemaVersion":1,"cases":[{"name":"a","expect":{"stdot":"x"}}]}', 'f.json'),
    ).toThrow(/cases\[0\]\.expect\.stdot is not a known field/);
    expect(() => parseCases('{', 'f.json')).toThrow(/f\.json is not valid JSON/);
  });

  it('judges exact stdout, substrings, JSON structure and exit codes', () => {
    expect(judgeCase(check({ stdout: 'a\n' }), result({ stdout: 'a\n' }))).toBeUndefined();
    expect(judgeCase(check({ stdout: 'a\n' }), result({ stdout: 'a' }))).toMatch(/expected "a\\n"/);
    expect(judgeCase(check({ contains: 'ell' }), result({ stdout: 'hello' }))).toBeUndefined();
    expect(
      judgeCase(check({ json: { a: [1, { b: 2 }] } }), result({ stdout: '{"a":[1,{"b":2}]}' })),
    ).toBeUndefined();
    expect(judgeCase(check({ json: { a: 1 } }), result({ stdout: '{"a":1,"b":2}' }))).toMatch(/expected/);
    expect(judgeCase(check({ json: { a: 1 } }), result({ stdout: 'nope' }))).toMatch(/not JSON/);
    expect(judgeCase(check({ stdout: '' }), result({ exitCode: 2, stderr: 'boom' }))).toMatch(
      /exit code 2, expected 0; stderr: boom/,
    );
    expect(judgeCase(check({ stdout: '' }), result({ exitCode: null, timedOut: true }))).toMatch(/timed out/);
  });

  it('fails a case whose expected output is missing', () => {
    expect(judgeCase(check({}), result({ stdout: 'anything' }))).toMatch(/no expected output/);
  });
});
