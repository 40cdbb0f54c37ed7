import { parse, type DefaultTreeAdapterMap } from 'parse5';
import { describe, expect, it } from 'vitest';
import type { CompareReport } from '../../../src/compare/compare.js';
import { lineDiff } from '../../../src/base/text-diff.js';
import { renderHtml, renderTable } from '../../../src/compare/render.js';

type Node = DefaultTreeAdapterMap['node'];
type Element = DefaultTreeAdapterMap['element'];

function elements(node: Node, out: Element[] = []): Element[] {
  if ('tagName' in node) out.push(node);
  for (const child of 'childNodes' in node ? node.childNodes : []) elements(child, out);
  if ('content' in node && node.content) elements(node.content as Node, out);
  return out;
}

const run = (input: string, stdout: string, medianMs: number) => ({
  input,
  exitCode: 0,
  signal: null,
  stdout,
  stderr: '',
  durationsMs: [medianMs],
  medianMs,
  p95Ms: medianMs * 1.5,
  limitHits: [],
  stable: true,
});

const report: CompareReport = {
  capability: 'hello',
  contentHash: `sha256:${'a'.repeat(64)}`,
  runsPerInput: 1,
  inputs: ['one'],
  environments: [
    {
      environment: 'shell',
      status: 'ok',
      how: 'node',
      isolation: { sandboxed: false, summary: 'host' },
      runs: [run('one', 'Hello <script>alert(1)</script>\n', 40)],
    },
    {
      environment: 'wasm',
      status: 'ok',
      how: 'component',
      isolation: { sandboxed: true, summary: 'wasm' },
      runs: [run('one', 'Hello, world\n', 2)],
    },
    { environment: 'docker', status: 'unavailable', reason: 'engine down', runs: [] },
  ],
  agreement: [{ input: 'one', equal: false, differing: ['wasm'] }],
  equal: false,
};

describe('compare rendering', () => {
  it('diffs lines readably', () => {
    expect(lineDiff('a\nb\nc', 'a\nx\nc')).toEqual(['  a', '- b', '+ x', '  c']);
    expect(lineDiff('same', 'same')).toEqual(['  same']);
  });

  it('renders a terminal table with the verdict and the diff', () => {
    const text = renderTable(report);
    expect(text).toMatch(/^wasm\s+one\s+0\s+2\.0\s+3\.0\s+-\s+Hello, world\\n ≠$/m);
    expect(text).toMatch(/^docker .*unavailable: engine down$/m);
    expect(text).toContain('+ Hello, world');
    expect(text).toContain('outputs: DIFFER');
  });

  it('renders a self-contained HTML page with an SVG chart and escaped output', () => {
    const html = renderHtml(report);
    const all = elements(parse(html));
    const tags = all.map((e) => e.tagName);
    // Nothing executable or external: capability output is escaped, no scripts, no links, no remote URLs.
    expect(tags).not.toContain('script');
    expect(tags).not.toContain('link');
    expect(tags).not.toContain('img');
    expect(html).not.toMatch(/(src|href)=/);
    const bars = all.filter(
      (e) => e.tagName === 'rect' && e.attrs.some((a) => a.name === 'class' && a.value === 'bar'),
    );
    expect(bars.map((b) => b.attrs.find((a) => a.name === 'data-env')?.value)).toEqual(['shell', 'wasm']);
    const widths = bars.map((b) => Number(b.attrs.find((a) => a.name === 'width')?.value));
    expect(widths[0]).toBeGreaterThan(widths[1] as number);
    const rows = all.filter(
      (e) => e.tagName === 'tr' && e.attrs.some((a) => a.name === 'class' && a.value.startsWith('env-')),
    );
    expect(rows).toHaveLength(3);
    expect(html).toContain('Hello &lt;script&gt;');
    const verdict = all.find((e) => e.attrs.some((a) => a.name === 'id' && a.value === 'verdict'));
    expect(verdict?.attrs.find((a) => a.name === 'class')?.value).toBe('differ');
  });

  it('draws the chart a person can read: a ms axis with gridlines, a legend, median and p95 at their values', () => {
    const all = elements(parse(renderHtml(report)));
    const attr = (e: Element, name: string): string | undefined =>
      e.attrs.find((a) => a.name === name)?.value;
    const cls = (name: string) => all.filter((e) => (attr(e, 'class') ?? '').split(' ').includes(name));
    const text = (e: Element): string =>
      e.childNodes.map((c) => ('value' in c ? c.value : 'tagName' in c ? text(c) : '')).join('');
    const ticks = cls('tick').map(text);
    expect(ticks[0]).toBe('0 ms');
    expect(ticks.every((t) => / ms$/.test(t))).toBe(true);
    const values = ticks.map((t) => Number.parseFloat(t));
    // The axis reaches past the largest p95 (60 ms) in even steps.
    expect(values.at(-1)).toBeGreaterThanOrEqual(60);
    expect(new Set(values.slice(1).map((v, i) => v - (values[i] as number))).size).toBe(1);
    expect(cls('grid')[0]?.childNodes.filter((c) => 'tagName' in c)).toHaveLength(ticks.length);
    expect(cls('legend-entry').map((e) => attr(e, 'data-env') ?? attr(e, 'data-mark'))).toEqual([
      'shell',
      'wasm',
      'median',
      'p95',
    ]);
    // Positions: x is linear in ms, so the bar ends at the median and the p95 tick sits at the p95.
    const tickX = cls('tick').map((e) => Number(attr(e, 'x')));
    const msPerPx = ((values.at(-1) as number) - 0) / ((tickX.at(-1) as number) - (tickX[0] as number));
    const at = (px: number): number => (px - (tickX[0] as number)) * msPerPx;
    const bars = cls('bar');
    const p95s = cls('p95');
    expect(at(Number(attr(bars[0] as Element, 'x')) + Number(attr(bars[0] as Element, 'width')))).toBeCloseTo(
      40,
      0,
    );
    expect(at(Number(attr(p95s[0] as Element, 'x1')))).toBeCloseTo(60, 0);
    expect(at(Number(attr(p95s[1] as Element, 'x1')))).toBeCloseTo(3, 0);
    // Each input is named on its rows.
    expect(cls('row').map((e) => attr(e, 'data-input'))).toEqual(['one', 'one']);
    expect(text(cls('row-label')[0] as Element)).toMatch(/^one shell$/);
  });

  it('names a lone --input row by its document', () => {
    const single = { ...report, inputs: ['input'], inputTexts: ['{"name":"world"}'] };
    single.environments = report.environments.map((e) => ({
      ...e,
      runs: e.runs.map((r) => ({ ...r, input: 'input' })),
    }));
    expect(renderHtml(single)).toContain('data-input="{&quot;name&quot;:&quot;world&quot;}"');
  });
});
