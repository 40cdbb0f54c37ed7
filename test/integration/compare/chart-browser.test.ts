import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { inflateSync } from 'node:zlib';
import { execa } from 'execa';
import { parse, type DefaultTreeAdapterMap } from 'parse5';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CompareReport, EnvironmentRun } from '../../../src/compare/compare.js';
import { renderHtml } from '../../../src/compare/render.js';

// The compare report as a person sees it: rendered by a real headless Chromium (scripts/provision-browser.sh
// installs Debian's chromium), its DOM read back and a screenshot taken.
const CHROMIUM = process.env.CAPSULE_CHROMIUM ?? '/usr/bin/chromium';

type Element = DefaultTreeAdapterMap['element'];
type Node = DefaultTreeAdapterMap['node'];

function elements(node: Node, out: Element[] = []): Element[] {
  if ('tagName' in node) out.push(node);
  for (const child of 'childNodes' in node ? node.childNodes : []) elements(child, out);
  if ('content' in node && node.content) elements(node.content as Node, out);
  return out;
}
const attr = (e: Element, name: string): string | undefined => e.attrs.find((a) => a.name === name)?.value;
const text = (e: Element): string =>
  e.childNodes.map((c) => ('value' in c ? c.value : 'tagName' in c ? text(c) : '')).join('');

const run = (input: string, medianMs: number, p95Ms: number): EnvironmentRun => ({
  input,
  exitCode: 0,
  signal: null,
  stdout: 'ok\n',
  stderr: '',
  durationsMs: [medianMs],
  medianMs,
  p95Ms,
  limitHits: [],
  stable: true,
});

const report: CompareReport = {
  capability: 'word-count',
  contentHash: `sha256:${'c'.repeat(64)}`,
  runsPerInput: 20,
  inputs: ['two lines', 'empty'],
  inputTexts: ['{"text":"one two\\nthree"}', '{"text":""}'],
  environments: [
    { environment: 'shell', status: 'ok', runs: [run('two lines', 14, 19), run('empty', 12, 15)] },
    { environment: 'wasm', status: 'ok', runs: [run('two lines', 3.2, 4.1), run('empty', 2.9, 3.5)] },
    { environment: 'docker', status: 'ok', runs: [run('two lines', 180, 240), run('empty', 175, 210)] },
  ],
  agreement: [
    { input: 'two lines', equal: true, differing: [] },
    { input: 'empty', equal: true, differing: [] },
  ],
  equal: true,
};

/** Chromium with nothing of its own: a fresh profile, no network services, no GPU. */
async function chromium(args: string[], dir: string): Promise<string> {
  const profile = await mkdtemp(path.join(dir, 'profile-'));
  const r = await execa(
    CHROMIUM,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      `--user-data-dir=${profile}`,
      ...args,
    ],
    { reject: false, timeout: 90_000 },
  );
  if (r.exitCode !== 0) throw new Error(`chromium exited ${r.exitCode}: ${r.stderr}`);
  return r.stdout;
}

/** The distinct RGB colours of an 8-bit, non-interlaced PNG (what Chromium writes), by decoding it. */
function pngColours(png: Buffer): Set<number> {
  expect(png.subarray(1, 4).toString('latin1')).toBe('PNG');
  let offset = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Buffer[] = [];
  while (offset < png.length) {
    const length = png.readUInt32BE(offset);
    const type = png.subarray(offset + 4, offset + 8).toString('latin1');
    const data = png.subarray(offset + 8, offset + 8 + length);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      expect(data[8]).toBe(8);
      channels = ({ 2: 3, 6: 4 } as Record<number, number>)[data[9] as number] ?? 0;
      expect(channels).toBeGreaterThan(0);
    }
    if (type === 'IDAT') idat.push(data);
    offset += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const prev = Buffer.alloc(stride);
  const line = Buffer.alloc(stride);
  const colours = new Set<number>();
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)] as number;
    for (let i = 0; i < stride; i++) {
      const v = raw[y * (stride + 1) + 1 + i] as number;
      const a = i >= channels ? (line[i - channels] as number) : 0;
      const b = prev[i] as number;
      const c = i >= channels ? (prev[i - channels] as number) : 0;
      const p = a + b - c;
      const paeth =
        Math.abs(p - a) <= Math.abs(p - b) && Math.abs(p - a) <= Math.abs(p - c)
          ? a
          : Math.abs(p - b) <= Math.abs(p - c)
            ? b
            : c;
      const add = [0, a, b, (a + b) >> 1, paeth][filter] ?? 0;
      line[i] = (v + add) & 0xff;
    }
    for (let x = 0; x < width; x++) {
      const o = x * channels;
      colours.add(((line[o] as number) << 16) | ((line[o + 1] as number) << 8) | (line[o + 2] as number));
    }
    line.copy(prev);
  }
  return colours;
}

describe('the compare chart in a real browser', () => {
  let dir: string;
  let page: string;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM))
      throw new Error(`${CHROMIUM} is missing: run scripts/provision-browser.sh first`);
    dir = await mkdtemp(path.join(tmpdir(), 'capsule-chart-'));
    page = path.join(dir, 'report.html');
    await writeFile(page, renderHtml(report));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('the rendered DOM has an axis with ms ticks, gridlines, a legend and a labelled row per input and environment', async () => {
    const dom = await chromium(['--dump-dom', pathToFileURL(page).href], dir);
    const all = elements(parse(dom));
    const svg = all.find((e) => e.tagName === 'svg');
    expect(svg, 'no <svg> in the rendered page').toBeDefined();
    const within = elements(svg as Element);
    const cls = (name: string): Element[] =>
      within.filter((e) => (attr(e, 'class') ?? '').split(' ').includes(name));
    expect(cls('x-axis')).toHaveLength(1);
    const ticks = cls('tick').map(text);
    expect(ticks.length).toBeGreaterThanOrEqual(3);
    expect(ticks.every((t) => /^\d+(\.\d+)? ms$/.test(t))).toBe(true);
    expect(Number.parseFloat(ticks.at(-1) as string)).toBeGreaterThanOrEqual(240);
    expect(text(cls('axis-title')[0] as Element)).toMatch(/milliseconds/);
    expect(cls('grid')).toHaveLength(1);
    const legend = cls('legend-entry').map(text);
    expect(legend).toEqual(['shell', 'wasm', 'docker', 'bar: median', 'p95']);
    const rows = cls('row').map((e) => `${attr(e, 'data-input')}/${attr(e, 'data-env')}`);
    expect(rows).toEqual([
      'two lines/shell',
      'two lines/wasm',
      'two lines/docker',
      'empty/shell',
      'empty/wasm',
      'empty/docker',
    ]);
    expect(cls('row-label').map(text)[0]).toBe('two lines shell');
  });

  it('the screenshot is a real picture: a PNG of many colours, not one blank colour', async () => {
    const shot = path.join(dir, 'report.png');
    await chromium(['--window-size=900,700', `--screenshot=${shot}`, pathToFileURL(page).href], dir);
    expect((await stat(shot)).size).toBeGreaterThan(1000);
    const colours = pngColours(await readFile(shot));
    // The three environment colours are painted (bars and legend swatches), among text and gridlines.
    for (const hex of ['d97706', '7c3aed', '0284c7'])
      expect(colours.has(Number.parseInt(hex, 16)), hex).toBe(true);
    expect(colours.size).toBeGreaterThan(8);
  });
});
