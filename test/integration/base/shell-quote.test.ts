import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { shellWord, singleQuoted } from '../../../src/base/shell-quote.js';
import { HOSTILE_WORDS } from '../../helpers/shell-words.js';

describe('shell words through a real shell', () => {
  it('come back as exactly the text, one word each', () => {
    for (const w of [...HOSTILE_WORDS, 'plain']) {
      for (const quoted of [shellWord(w), singleQuoted(w)]) {
        // One line per argument: a split, a glob or an expansion would print something else.
        const out = execFileSync('sh', ['-c', `printf '%s\\n' ${quoted}`], { cwd: '/', encoding: 'utf8' });
        expect(out).toBe(`${w}\n`);
      }
    }
  });
});
