import { parse, type DefaultTreeAdapterMap } from 'parse5';
import { describe, expect, it } from 'vitest';
import type { CompareReport } from '../../../src/compare/compare.js';
import { lineDiff } from '../../../src/text-diff.js';
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
});
