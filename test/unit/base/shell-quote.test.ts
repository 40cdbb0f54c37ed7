import { describe, expect, it } from 'vitest';
import { shellWord, singleQuoted } from '../../../src/base/shell-quote.js';
import { HOSTILE_WORDS } from '../../helpers/shell-words.js';

describe('shell words', () => {
  it('leave plain words as they are and quote anything a shell would expand or split', () => {
    expect(shellWord('run_capability:hello')).toBe('run_capability:hello');
    expect(shellWord('--mode=edit')).toBe('--mode=edit');
    for (const w of HOSTILE_WORDS) expect(shellWord(w)).toBe(singleQuoted(w));
  });
});
