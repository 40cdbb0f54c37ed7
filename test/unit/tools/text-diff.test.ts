import { describe, expect, it } from 'vitest';
import { unifiedDiff } from '../../../src/tools/text-diff.js';

const labels = { old: 'a', new: 'b' };

describe('unifiedDiff', () => {
  it('is empty for equal texts', () => {
    expect(unifiedDiff('x\ny\n', 'x\ny\n', labels)).toBe('');
  });

  it('writes hunks with context and correct ranges', () => {
    const old = Array.from({ length: 20 }, (_, i) => `l${i + 1}`).join('\n') + '\n';
    const changed = old.replace('l2\n', 'L2\n').replace('l18\n', '');
    expect(unifiedDiff(old, changed, labels)).toBe(
      '--- a\n+++ b\n' +
        '@@ -1,5 +1,5 @@\n l1\n-l2\n+L2\n l3\n l4\n l5\n' +
        '@@ -15,6 +15,5 @@\n l15\n l16\n l17\n-l18\n l19\n l20\n',
    );
  });

  it('handles empty sides', () => {
    expect(unifiedDiff('', 'a\nb\n', labels)).toBe('--- a\n+++ b\n@@ -0,0 +1,2 @@\n+a\n+b\n');
    expect(unifiedDiff('a\n', '', labels)).toBe('--- a\n+++ b\n@@ -1,1 +0,0 @@\n-a\n');
  });
});
