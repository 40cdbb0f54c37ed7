/**
 * A readable line diff (`-` expected, `+` actual, ` ` common) from a longest-common-subsequence table.
 * Bounded: past `maxLines` lines on either side it compares the first lines only and says so.
 */
export function lineDiff(expected: string, actual: string, maxLines = 400): string[] {
  const a = expected.split('\n');
  const b = actual.split('\n');
  const cut = a.length > maxLines || b.length > maxLines;
  const x = a.slice(0, maxLines);
  const y = b.slice(0, maxLines);
  const lcs: number[][] = Array.from({ length: x.length + 1 }, () => new Array<number>(y.length + 1).fill(0));
  for (let i = x.length - 1; i >= 0; i--) {
    for (let j = y.length - 1; j >= 0; j--) {
      const row = lcs[i] as number[];
      row[j] =
        x[i] === y[j] ? (lcs[i + 1]?.[j + 1] ?? 0) + 1 : Math.max(lcs[i + 1]?.[j] ?? 0, row[j + 1] ?? 0);
    }
  }
  const out: string[] = [];
  let i = 0;
  let j = 0;
  while (i < x.length && j < y.length) {
    if (x[i] === y[j]) {
      out.push(`  ${x[i]}`);
      i++;
      j++;
    } else if ((lcs[i + 1]?.[j] ?? 0) >= (lcs[i]?.[j + 1] ?? 0)) {
      out.push(`- ${x[i++]}`);
    } else {
      out.push(`+ ${y[j++]}`);
    }
  }
  while (i < x.length) out.push(`- ${x[i++]}`);
  while (j < y.length) out.push(`+ ${y[j++]}`);
  if (cut) out.push(`… (compared the first ${maxLines} lines only)`);
  return out;
}
