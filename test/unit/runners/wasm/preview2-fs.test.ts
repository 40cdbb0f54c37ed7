import { describe, expect, it } from 'vitest';
import { isReservedName } from '../../../../src/permissions/protected-state.js';
import { isHiddenName } from '../../../../src/runners/wasm/preview2-fs.js';

describe('isHiddenName (the worker’s copy of isReservedName)', () => {
  it('agrees with isReservedName on capsule’s names and their look-alikes', () => {
    const names = [
      'capsule.json',
      'CAPSULE.JSON',
      'Capsule.Json',
      '.capsule',
      '.CAPSULE',
      '.capsule-gen-1a2b',
      '.capsule.lock',
      '.capsule_x',
      '.capsulex',
      'capsule',
      'capsule.json.bak',
      'my-capsule.json',
      '.capsule-',
      'data',
      '',
    ];
    for (const n of names) expect(isHiddenName(n), n).toBe(isReservedName(n));
  });
});
