import { describe, expect, it } from 'vitest';
import { parseCases } from '../../../src/cases/cases.js';

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
});
