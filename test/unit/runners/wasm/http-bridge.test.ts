import { describe, expect, it } from 'vitest';
import { requestFromGuest } from '../../../../src/runners/wasm/http-bridge.js';

describe('requestFromGuest (guest values are untrusted)', () => {
  it('accepts a well-formed request', () => {
    expect(
      requestFromGuest({
        method: 'GET',
        url: 'http://a.test/',
        headers: [['accept', 'text/plain']],
        body: null,
      }),
    ).toEqual({
      method: 'GET',
      url: 'http://a.test/',
      headers: [['accept', 'text/plain']],
      body: undefined,
    });
  });

  it.each([
    [null, /record/],
    [{ method: 1, url: 'x' }, /method/],
    [{ method: 'GET', url: 7 }, /url/],
    [{ method: 'GET', url: 'x', headers: [['a']] }, /\[name, value\]/],
    [{ method: 'GET', url: 'x', headers: [['a', 'b\r\nhost: evil']] }, /line break/],
    [{ method: 'GET', url: 'x', headers: [['a\0', 'b']] }, /line break/],
    [{ method: 'GET', url: 'x', headers: Array.from({ length: 65 }, () => ['a', 'b']) }, /at most 64/],
    [{ method: 'GET', url: 'x', body: 'text' }, /bytes/],
  ])('refuses %j', (raw, message) => {
    const r = requestFromGuest(raw);
    expect(typeof r).toBe('string');
    expect(r).toMatch(message);
  });
});
