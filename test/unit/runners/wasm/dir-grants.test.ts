import { describe, expect, it } from 'vitest';
import { guestPathFor } from '../../../../src/runners/wasm/dir-grants.js';

describe('guestPathFor', () => {
  it('puts a grant at /<declared path>, normalized', () => {
    expect(guestPathFor('data')).toBe('/data');
    expect(guestPathFor('data/in/')).toBe('/data/in');
    expect(guestPathFor('./data//in')).toBe('/data/in');
    expect(guestPathFor('.')).toBe('/');
  });
});
