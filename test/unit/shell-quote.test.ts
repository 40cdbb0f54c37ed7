import { describe, expect, it } from 'vitest';
import { shellWord, singleQuoted } from '../../src/shell-quote.js';

describe('shell words', () => {
  const hostile = [
    "it's",
    '$(touch x)',
    '`id`',
    'a b',
    '*',
    'run_command:rm *',
    '',
    "'",
    '\\',
    '~root',
    'a;b',
    '!x',
  ];

  it('leave plain words as they are and quote anything a shell would expand or split', () => {
    expect(shellWord('run_capability:hello')).toBe('run_capability:hello');
    expect(shellWord('--mode=edit')).toBe('--mode=edit');
    for (const w of hostile) expect(shellWord(w)).toBe(singleQuoted(w));
  });
});
