/** Lines beyond which diff refuses to compute (Myers is O((n+m)·D); keep it bounded). */
export const MAX_DIFF_LINES = 20_000;

type Op = { type: 'equal' | 'delete' | 'insert'; line: string };

function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** Myers' shortest edit script between two line arrays. */
function editScript(a: readonly string[], b: readonly string[]): Op[] {
  const n = a.length;
  const m = b.length;
  const max = n + m;
  const offset = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace: Int32Array[] = [];
  let found = false;
  for (let d = 0; d <= max && !found; d++) {
    trace.push(v.slice());
    for (let k = -d; k <= d; k += 2) {
      let x: number;
      if (k === -d || (k !== d && (v[offset + k - 1] as number) < (v[offset + k + 1] as number))) {
        x = v[offset + k + 1] as number;
      } else {
        x = (v[offset + k - 1] as number) + 1;
      }
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v[offset + k] = x;
      if (x >= n && y >= m) {
        found = true;
        break;
      }
    }
  }
  // Walk the trace backwards to recover the script.
  const ops: Op[] = [];
  let x = n;
  let y = m;
  for (let d = trace.length - 1; d >= 0; d--) {
    const vd = trace[d] as Int32Array;
    const k = x - y;
    let prevK: number;
    if (k === -d || (k !== d && (vd[offset + k - 1] as number) < (vd[offset + k + 1] as number)))
      prevK = k + 1;
    else prevK = k - 1;
    const prevX = vd[offset + prevK] as number;
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      ops.push({ type: 'equal', line: a[x - 1] as string });
      x--;
      y--;
    }
    if (d > 0) {
      if (x === prevX) ops.push({ type: 'insert', line: b[y - 1] as string });
      else ops.push({ type: 'delete', line: a[x - 1] as string });
    }
    x = prevX;
    y = prevY;
  }
  return ops.reverse();
}

/**
 * A unified diff (`---`/`+++`/`@@` hunks with `context` lines around each change); empty string when
 * the texts are equal. Pure.
 */
export function unifiedDiff(
  oldText: string,
  newText: string,
  labels: { old: string; new: string },
  context = 3,
): string {
  const a = splitLines(oldText);
  const b = splitLines(newText);
  if (a.length > MAX_DIFF_LINES || b.length > MAX_DIFF_LINES) {
    throw new RangeError(`diff is limited to ${MAX_DIFF_LINES} lines per side`);
  }
  const ops = editScript(a, b);
  if (ops.every((o) => o.type === 'equal')) return '';
  // Annotate each op with its line numbers, then group changes within 2·context lines into hunks.
  const rows: Array<Op & { ai: number; bi: number }> = [];
  let ai = 0;
  let bi = 0;
  for (const op of ops) {
    rows.push({ ...op, ai, bi });
    if (op.type !== 'insert') ai++;
    if (op.type !== 'delete') bi++;
  }
  const changed = rows.map((r, i) => (r.type === 'equal' ? -1 : i)).filter((i) => i >= 0);
  const hunks: Array<[number, number]> = [];
  for (const i of changed) {
    const start = Math.max(0, i - context);
    const end = Math.min(rows.length - 1, i + context);
    const last = hunks[hunks.length - 1];
    if (last !== undefined && start <= last[1] + 1) last[1] = end;
    else hunks.push([start, end]);
  }
  let out = `--- ${labels.old}\n+++ ${labels.new}\n`;
  for (const [start, end] of hunks) {
    const slice = rows.slice(start, end + 1);
    const first = slice[0] as (typeof rows)[number];
    const oldCount = slice.filter((r) => r.type !== 'insert').length;
    const newCount = slice.filter((r) => r.type !== 'delete').length;
    const oldStart = oldCount === 0 ? first.ai : first.ai + 1;
    const newStart = newCount === 0 ? first.bi : first.bi + 1;
    out += `@@ -${oldStart},${oldCount} +${newStart},${newCount} @@\n`;
    for (const r of slice) out += `${r.type === 'equal' ? ' ' : r.type === 'delete' ? '-' : '+'}${r.line}\n`;
  }
  return out;
}
