import { diffArrays, structuredPatch } from 'diff';

/**
 * The one text diff of capsule (the agent's `diff` tool, `capsule compare`'s output diff), on jsdiff.
 * Pure. Bounded: Myers' algorithm costs O((n+m)·D) time and memory grows with D, so the unified diff
 * gives up past MAX_EDIT_LINES changed lines (or DIFF_TIMEOUT_MS) instead of allocating without end.
 */

/** Changed lines (removed + added) past which unifiedDiff gives up. */
const MAX_EDIT_LINES = 2_000;
/** A second bound on the work, for inputs cheap in edits but slow to compare. */
const DIFF_TIMEOUT_MS = 2_000;

export type UnifiedDiff =
  | { identical: true; diff: '' }
  | { identical: false; diff: string }
  | { identical: false; tooLarge: true; diff: ''; reason: string };

/**
 * A unified diff (`---`/`+++`/`@@` hunks with `context` lines around each change, and
 * `\ No newline at end of file` where one side lacks it), or a bounded "too large" answer.
 */
export function unifiedDiff(
  oldText: string,
  newText: string,
  labels: { old: string; new: string },
  context = 3,
): UnifiedDiff {
  if (oldText === newText) return { identical: true, diff: '' };
  const patch = structuredPatch(labels.old, labels.new, oldText, newText, undefined, undefined, {
    context,
    maxEditLength: MAX_EDIT_LINES,
    timeout: DIFF_TIMEOUT_MS,
  });
  if (patch === undefined) {
    return {
      identical: false,
      tooLarge: true,
      diff: '',
      reason: `the texts differ in more than ${MAX_EDIT_LINES} lines (or comparing them took over ${DIFF_TIMEOUT_MS} ms); compare smaller parts`,
    };
  }
  let out = `--- ${labels.old}\n+++ ${labels.new}\n`;
  for (const hunk of patch.hunks) {
    // An empty side is numbered from 0 in unified diffs (`-0,0`).
    const oldStart = hunk.oldLines === 0 ? hunk.oldStart - 1 : hunk.oldStart;
    const newStart = hunk.newLines === 0 ? hunk.newStart - 1 : hunk.newStart;
    out += `@@ -${oldStart},${hunk.oldLines} +${newStart},${hunk.newLines} @@\n`;
    for (const line of hunk.lines) out += `${line}\n`;
  }
  return { identical: false, diff: out };
}

/**
 * A readable line diff for a terminal (`-` expected, `+` actual, ` ` common). Bounded: past `maxLines`
 * lines on either side it compares the first lines only and says so.
 */
export function lineDiff(expected: string, actual: string, maxLines = 400): string[] {
  const a = expected.split('\n');
  const b = actual.split('\n');
  const cut = a.length > maxLines || b.length > maxLines;
  const out: string[] = [];
  for (const part of diffArrays(a.slice(0, maxLines), b.slice(0, maxLines))) {
    const mark = part.removed ? '- ' : part.added ? '+ ' : '  ';
    for (const line of part.value) out.push(`${mark}${line}`);
  }
  if (cut) out.push(`… (compared the first ${maxLines} lines only)`);
  return out;
}
