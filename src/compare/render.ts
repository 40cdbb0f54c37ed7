import { columnName, type CompareReport, type EnvironmentReport } from './compare.js';
import { lineDiff } from '../base/text-diff.js';

const ms = (n: number): string => (n >= 100 ? n.toFixed(0) : n.toFixed(1));
const oneLine = (s: string, width: number): string => {
  const flat = JSON.stringify(s).slice(1, -1);
  return flat.length > width ? `${flat.slice(0, width - 1)}…` : flat;
};

function pad(cells: string[], widths: number[]): string {
  return cells
    .map((c, i) => c.padEnd(widths[i] ?? 0))
    .join('  ')
    .trimEnd();
}

/** The terminal table: one row per environment and input, then diffs where outputs differ. */
export function renderTable(report: CompareReport): string {
  const header = ['ENV', 'INPUT', 'EXIT', 'MEDIAN ms', 'P95 ms', 'LIMITS', 'STDOUT'];
  const rows: string[][] = [];
  for (const env of report.environments) {
    if (env.status !== 'ok') {
      rows.push([columnName(env), '-', '-', '-', '-', '-', `${env.status}: ${env.reason ?? ''}`]);
      continue;
    }
    for (const run of env.runs) {
      const agreement = report.agreement.find((a) => a.input === run.input);
      const mark = agreement?.differing.includes(columnName(env)) ? ' ≠' : '';
      rows.push([
        columnName(env),
        run.input,
        run.exitCode === null ? `sig ${run.signal ?? '?'}` : String(run.exitCode),
        ms(run.medianMs),
        ms(run.p95Ms),
        run.limitHits.join(',') || '-',
        `${oneLine(run.stdout, 48)}${mark}${run.stable ? '' : ' (unstable across runs)'}`,
      ]);
    }
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  let out = `${report.capability} (${report.contentHash.slice(0, 19)}…), ${report.runsPerInput} run(s) per input\n`;
  out += `${pad(header, widths)}\n${rows.map((r) => pad(r, widths)).join('\n')}\n`;
  for (const env of report.environments) {
    if (env.status === 'ok')
      out += `isolation ${columnName(env)}: ${env.isolation?.summary ?? '?'} (${env.how ?? ''})\n`;
  }
  out += diffs(report).join('\n');
  out += report.equal ? 'outputs: equal in every environment that ran\n' : 'outputs: DIFFER\n';
  return out;
}

function diffs(report: CompareReport): string[] {
  const out: string[] = [];
  const ran = report.environments.filter((e) => e.status === 'ok');
  const reference = ran[0];
  for (const [i, a] of report.agreement.entries()) {
    if (a.equal || reference === undefined) continue;
    for (const envName of a.differing) {
      const other = ran.find((e) => columnName(e) === envName) as EnvironmentReport;
      const ref = reference.runs[i];
      const got = other.runs[i];
      out.push(`--- ${columnName(reference)} / ${a.input} (exit ${ref?.exitCode ?? '?'})`);
      out.push(`+++ ${columnName(other)} / ${a.input} (exit ${got?.exitCode ?? '?'})`);
      out.push(...lineDiff(ref?.stdout ?? '', got?.stdout ?? '').slice(0, 200), '');
    }
  }
  return out;
}

const escapeHtml = (s: string): string =>
  s
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');

const COLORS: Record<string, string> = { shell: '#d97706', wasm: '#7c3aed', docker: '#0284c7' };

/** A "nice" axis step (1, 2 or 5 × 10^k) that splits 0…max into about `count` intervals. */
function niceStep(max: number, count = 5): number {
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  return step ?? 10 * magnitude;
}

/** A tick value as text with its unit: whole numbers plain, small steps with the decimals they need. */
function tickText(value: number, step: number): string {
  const decimals = step >= 1 ? 0 : Math.min(3, Math.ceil(-Math.log10(step)));
  return `${value.toFixed(decimals)} ms`;
}

/** How a chart row names its input: the case name, or for a lone `--input` the document itself. */
function inputLabel(name: string, text: string | undefined): string {
  if (name !== 'input' || text === undefined) return name;
  return text.length > 28 ? `${text.slice(0, 27)}…` : text;
}

/**
 * An SVG chart of the timings: one row per input and environment, a bar from 0 to the median and a
 * whisker from the median to a p95 tick, both at their values on a labelled millisecond axis with
 * gridlines; a legend names the environments' colours and the two marks. No scripts, no external assets.
 */
export function renderSvgChart(report: CompareReport): string {
  const ran = report.environments.filter((e) => e.status === 'ok');
  const texts = report.inputTexts ?? [];
  const rows = report.inputs.flatMap((name, i) =>
    ran.flatMap((e) => {
      const r = e.runs.find((run) => run.input === name);
      return r === undefined
        ? []
        : [
            {
              input: inputLabel(name, texts[i]),
              first: e === ran[0],
              env: columnName(e),
              color: COLORS[e.environment] ?? '#666',
              median: r.medianMs,
              p95: r.p95Ms,
            },
          ];
    }),
  );
  const rowH = 24;
  const left = 210;
  const right = 30;
  const width = 760;
  const plot = width - left - right;
  const legendH = 28;
  const top = 30 + legendH;
  const axisH = 44;
  const height = top + rows.length * rowH + axisH;
  const step = niceStep(Math.max(0.001, ...rows.map((b) => b.p95)));
  const ticks = Math.max(1, Math.ceil(Math.max(0.001, ...rows.map((b) => b.p95)) / step));
  const max = ticks * step;
  const x = (v: number): number => left + (v / max) * plot;
  const bottom = top + rows.length * rowH;
  const n = (v: number): string => v.toFixed(1);

  let svg = `<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-labelledby="chart-title" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`;
  svg += `<title id="chart-title">${escapeHtml(report.capability)}: time per run by input and environment (median and p95, ms)</title>`;
  svg += `<rect width="${width}" height="${height}" fill="#fff"/>`;
  svg += `<text class="chart-title" x="${left}" y="18" font-size="14" font-weight="bold">Time per run (ms), ${report.runsPerInput} run(s) per input</text>`;

  // Legend: one swatch per environment that ran, then what the bar and the tick mean.
  svg += `<g class="legend" transform="translate(${left},${30})">`;
  let lx = 0;
  for (const e of ran) {
    const name = columnName(e);
    svg += `<g class="legend-entry" data-env="${escapeHtml(name)}" transform="translate(${lx},0)"><rect width="14" height="14" fill="${COLORS[e.environment] ?? '#666'}"/><text x="20" y="12">${escapeHtml(name)}</text></g>`;
    lx += 30 + name.length * 8;
  }
  svg += `<g class="legend-entry" data-mark="median" transform="translate(${lx},0)"><rect width="22" height="14" fill="#9ca3af"/><text x="28" y="12">bar: median</text></g>`;
  lx += 110;
  svg += `<g class="legend-entry" data-mark="p95" transform="translate(${lx},0)"><line x1="0" x2="16" y1="7" y2="7" stroke="#111"/><line x1="16" x2="16" y1="0" y2="14" stroke="#111" stroke-width="2"/><text x="24" y="12">p95</text></g>`;
  svg += '</g>';

  // Gridlines and the axis, under the bars.
  svg += '<g class="grid" stroke="#e5e7eb">';
  for (let t = 0; t <= ticks; t++)
    svg += `<line x1="${n(x(t * step))}" x2="${n(x(t * step))}" y1="${top}" y2="${bottom}"/>`;
  svg += '</g>';
  svg += `<g class="axis x-axis"><line x1="${left}" x2="${left + plot}" y1="${bottom}" y2="${bottom}" stroke="#111"/>`;
  for (let t = 0; t <= ticks; t++) {
    const tx = n(x(t * step));
    svg += `<line x1="${tx}" x2="${tx}" y1="${bottom}" y2="${bottom + 5}" stroke="#111"/>`;
    svg += `<text class="tick" x="${tx}" y="${bottom + 18}" text-anchor="middle">${tickText(t * step, step)}</text>`;
  }
  svg += `<text class="axis-title" x="${left + plot / 2}" y="${bottom + 36}" text-anchor="middle">time per run, milliseconds</text></g>`;

  for (const [i, b] of rows.entries()) {
    const y = top + i * rowH;
    const color = b.color;
    svg += `<g class="row" data-env="${escapeHtml(b.env)}" data-input="${escapeHtml(b.input)}">`;
    if (b.first && i > 0) svg += `<line x1="8" x2="${width - right}" y1="${y}" y2="${y}" stroke="#d1d5db"/>`;
    svg += `<text class="row-label" x="${left - 8}" y="${y + 16}" text-anchor="end">${b.first ? `<tspan font-weight="bold">${escapeHtml(b.input)}</tspan> ` : ''}<tspan fill="#555">${escapeHtml(b.env)}</tspan></text>`;
    svg += `<rect class="bar" data-env="${escapeHtml(b.env)}" data-median="${b.median.toFixed(3)}" x="${left}" y="${y + 4}" width="${n(Math.max(1, x(b.median) - left))}" height="${rowH - 8}" fill="${color}"><title>${escapeHtml(`${b.input} · ${b.env}`)}: median ${ms(b.median)} ms, p95 ${ms(b.p95)} ms</title></rect>`;
    svg += `<line class="whisker" x1="${n(x(b.median))}" x2="${n(x(b.p95))}" y1="${y + rowH / 2}" y2="${y + rowH / 2}" stroke="#111"/>`;
    svg += `<line class="p95" data-p95="${b.p95.toFixed(3)}" x1="${n(x(b.p95))}" x2="${n(x(b.p95))}" y1="${y + 3}" y2="${y + rowH - 3}" stroke="#111" stroke-width="2"/>`;
    svg += '</g>';
  }
  return `${svg}</svg>`;
}

const engineAttr = (e: EnvironmentReport): string =>
  e.engine !== undefined ? ` data-engine="${escapeHtml(e.engine)}"` : '';

/** A self-contained HTML page: summary, per-environment table, diffs, SVG chart; no scripts, no external assets. */
export function renderHtml(report: CompareReport): string {
  const rows = report.environments
    .flatMap((e) =>
      e.status !== 'ok'
        ? [
            `<tr class="env-${e.environment}"${engineAttr(e)}><td>${escapeHtml(columnName(e))}</td><td colspan="6">${escapeHtml(`${e.status}: ${e.reason ?? ''}`)}</td></tr>`,
          ]
        : e.runs.map(
            (r) =>
              `<tr class="env-${e.environment}"${engineAttr(e)}><td>${escapeHtml(columnName(e))}</td><td>${escapeHtml(r.input)}</td><td>${r.exitCode ?? `signal ${escapeHtml(r.signal ?? '?')}`}</td><td>${ms(r.medianMs)}</td><td>${ms(r.p95Ms)}</td><td>${escapeHtml(r.limitHits.join(', ') || '-')}</td><td><pre>${escapeHtml(r.stdout.slice(0, 4000))}</pre></td></tr>`,
          ),
    )
    .join('\n');
  const isolation = report.environments
    .filter((e) => e.status === 'ok')
    .map(
      (e) =>
        `<li><b>${escapeHtml(columnName(e))}</b>: ${escapeHtml(e.isolation?.summary ?? '')} <i>(${escapeHtml(e.how ?? '')})</i></li>`,
    )
    .join('\n');
  const diffText = diffs(report).join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>capsule compare: ${escapeHtml(report.capability)}</title>
<style>body{font-family:sans-serif;margin:2rem;color:#111}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}pre{margin:0;white-space:pre-wrap;max-width:40rem}.equal{color:#15803d}.differ{color:#b91c1c}</style>
</head><body>
<h1>capsule compare: ${escapeHtml(report.capability)}</h1>
<p>Content hash <code>${escapeHtml(report.contentHash)}</code>; ${report.runsPerInput} run(s) per input.</p>
<p id="verdict" class="${report.equal ? 'equal' : 'differ'}">${report.equal ? 'Outputs are equal in every environment that ran.' : 'Outputs differ.'}</p>
<table id="results"><thead><tr><th>environment</th><th>input</th><th>exit</th><th>median ms</th><th>p95 ms</th><th>limits hit</th><th>stdout</th></tr></thead><tbody>
${rows}
</tbody></table>
<h2>Timings</h2>
${renderSvgChart(report)}
<h2>Isolation</h2><ul>${isolation}</ul>
${diffText ? `<h2>Differences</h2><pre id="diff">${escapeHtml(diffText)}</pre>` : ''}
</body></html>
`;
}
