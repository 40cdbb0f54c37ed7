import type { CompareReport, EnvironmentReport } from './compare.js';
import { lineDiff } from '../text-diff.js';

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
      rows.push([env.environment, '-', '-', '-', '-', '-', `${env.status}: ${env.reason ?? ''}`]);
      continue;
    }
    for (const run of env.runs) {
      const agreement = report.agreement.find((a) => a.input === run.input);
      const mark = agreement?.differing.includes(env.environment) ? ' ≠' : '';
      rows.push([
        env.environment,
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
      out += `isolation ${env.environment}: ${env.isolation?.summary ?? '?'} (${env.how ?? ''})\n`;
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
      const other = ran.find((e) => e.environment === envName) as EnvironmentReport;
      const ref = reference.runs[i];
      const got = other.runs[i];
      out.push(`--- ${reference.environment} / ${a.input} (exit ${ref?.exitCode ?? '?'})`);
      out.push(`+++ ${other.environment} / ${a.input} (exit ${got?.exitCode ?? '?'})`);
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

/** An SVG bar chart of median (bar) and p95 (tick) per environment and input; no external assets. */
export function renderSvgChart(report: CompareReport): string {
  const bars = report.environments.flatMap((e) =>
    e.status === 'ok'
      ? e.runs.map((r) => ({
          label: `${e.environment} · ${r.input}`,
          env: e.environment,
          median: r.medianMs,
          p95: r.p95Ms,
        }))
      : [],
  );
  const rowH = 26;
  const left = 190;
  const width = 720;
  const plot = width - left - 90;
  const height = bars.length * rowH + 40;
  const max = Math.max(1, ...bars.map((b) => b.p95));
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="timings" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`;
  svg += `<text x="${left}" y="14" fill="#444">median (bar) and p95 (tick), ms — scale 0…${ms(max)}</text>`;
  for (const [i, b] of bars.entries()) {
    const y = 24 + i * rowH;
    const w = Math.max(1, (b.median / max) * plot);
    const p = (b.p95 / max) * plot;
    svg += `<text x="${left - 8}" y="${y + 15}" text-anchor="end">${escapeHtml(b.label)}</text>`;
    svg += `<rect class="bar" data-env="${escapeHtml(b.env)}" data-median="${b.median.toFixed(3)}" x="${left}" y="${y + 3}" width="${w.toFixed(1)}" height="${rowH - 8}" fill="${COLORS[b.env] ?? '#666'}"><title>${escapeHtml(b.label)}: median ${ms(b.median)} ms, p95 ${ms(b.p95)} ms</title></rect>`;
    svg += `<line x1="${(left + p).toFixed(1)}" x2="${(left + p).toFixed(1)}" y1="${y + 1}" y2="${y + rowH - 3}" stroke="#111" stroke-width="2"/>`;
    svg += `<text x="${(left + Math.max(w, p) + 6).toFixed(1)}" y="${y + 15}">${ms(b.median)}</text>`;
  }
  return `${svg}</svg>`;
}

/** A self-contained HTML page: summary, per-environment table, diffs, SVG chart; no scripts, no external assets. */
export function renderHtml(report: CompareReport): string {
  const rows = report.environments
    .flatMap((e) =>
      e.status !== 'ok'
        ? [
            `<tr class="env-${e.environment}"><td>${e.environment}</td><td colspan="6">${escapeHtml(`${e.status}: ${e.reason ?? ''}`)}</td></tr>`,
          ]
        : e.runs.map(
            (r) =>
              `<tr class="env-${e.environment}"><td>${e.environment}</td><td>${escapeHtml(r.input)}</td><td>${r.exitCode ?? `signal ${escapeHtml(r.signal ?? '?')}`}</td><td>${ms(r.medianMs)}</td><td>${ms(r.p95Ms)}</td><td>${escapeHtml(r.limitHits.join(', ') || '-')}</td><td><pre>${escapeHtml(r.stdout.slice(0, 4000))}</pre></td></tr>`,
          ),
    )
    .join('\n');
  const isolation = report.environments
    .filter((e) => e.status === 'ok')
    .map(
      (e) =>
        `<li><b>${e.environment}</b>: ${escapeHtml(e.isolation?.summary ?? '')} <i>(${escapeHtml(e.how ?? '')})</i></li>`,
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
