import { describe, expect, it } from 'vitest';
import { unifiedDiff } from '../../../src/base/text-diff.js';

const labels = { old: 'a', new: 'b' };

describe('unifiedDiff', () => {
  it('is empty for equal texts', () => {
    expect(unifiedDiff('x\ny\n', 'x\ny\n', labels)).toEqual({ identical: true, diff: '' });
  });

  it('writes hunks with context and correct ranges', () => {
    const old = Array.from({ length: 20 }, (_, i) => `l${i + 1}`).join('\n') + '\n';
    const changed = old.replace('l2\n', 'L2\n').replace('l18\n', '');
    expect(unifiedDiff(old, changed, labels).diff).toBe(
      '--- a\n+++ b\n' +
        '@@ -1,5 +1,5 @@\n l1\n-l2\n+L2\n l3\n l4\n l5\n' +
        '@@ -15,6 +15,5 @@\n l15\n l16\n l17\n-l18\n l19\n l20\n',
    );
  });

  it('handles empty sides', () => {
    expect(unifiedDiff('', 'a\nb\n', labels).diff).toBe('--- a\n+++ b\n@@ -0,0 +1,2 @@\n+a\n+b\n');
    expect(unifiedDiff('a\n', '', labels).diff).toBe('--- a\n+++ b\n@@ -1,1 +0,0 @@\n-a\n');
  });

  it('shows a change of the final newline only', () => {
    const r = unifiedDiff('x\ny\n', 'x\ny', labels);
    expect(r.identical).toBe(false);
    expect(r.diff).toBe('--- a\n+++ b\n@@ -1,2 +1,2 @@\n x\n-y\n+y\n\\ No newline at end of file\n');
  });

  it('gives a bounded "too large" answer for two long texts that differ in every line', () => {
    // Without a bound, Myers' trace for 3000 vs 3000 different lines is hundreds of MB.
    const side = (tag: string): string =>
      Array.from({ length: 3000 }, (_, i) => `${tag} line ${i}`).join('\n') + '\n';
    const r = unifiedDiff(side('old'), side('new'), labels);
    expect(r).toMatchObject({ identical: false, tooLarge: true, diff: '' });
    expect('reason' in r && r.reason).toMatch(/more than 2000 lines/);
  });

  it('still diffs long texts with few changes', () => {
    const old = Array.from({ length: 30_000 }, (_, i) => `l${i}`).join('\n') + '\n';
    const r = unifiedDiff(old, old.replace('l15000\n', 'L15000\n'), labels);
    expect(r.diff).toBe(
      '--- a\n+++ b\n@@ -14998,7 +14998,7 @@\n l14997\n l14998\n l14999\n-l15000\n+L15000\n l15001\n l15002\n l15003\n',
    );
  });
});
