// npm run bench: every measurement in one run, each against its raw floor measured in the same run.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchCliDocker } from './cli-docker.mjs';
import { benchDocker } from './docker.mjs';
import { benchLearn } from './learn.mjs';
import { benchLimits } from './limits.mjs';
import { benchEgress } from './egress.mjs';
import { benchGate } from './gate.mjs';
import { benchEnginePin } from './engine-pin.mjs';
import { benchPeers } from './peers.mjs';
import { benchPermissions } from './permissions.mjs';
import { benchPool } from './pool.mjs';
import { benchProcess } from './process.mjs';
import { benchRegistry } from './registry.mjs';
import { benchSchema } from './schema.mjs';
import { benchShell } from './shell.mjs';
import { benchStage } from './stage.mjs';
import { benchWasm } from './wasm.mjs';
import { benchWasmFiles } from './wasm-files.mjs';
import { benchWasmFs } from './wasm-fs.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const rows = [];
const suites = [
  ['process', () => benchProcess({ root })],
  ['shell', () => benchShell({ root })],
  ['wasm', () => benchWasm({ root })],
  ['wasm files', () => benchWasmFiles({ root })],
  ['wasm-fs', () => benchWasmFs({ root })],
  ['docker', () => benchDocker({ root })],
  ['egress', () => benchEgress({ root })],
  ['pool', () => benchPool({ root })],
  ['cli-docker', () => benchCliDocker({ root })],
  ['engine-pin', () => benchEnginePin({ root })],
  ['registry', () => benchRegistry()],
  ['schema', () => benchSchema()],
  ['stage', () => benchStage({ root })],
  ['permissions', () => benchPermissions()],
  ['gate', () => benchGate({ root })],
  ['peers', () => benchPeers({ root })],
  ['limits', () => benchLimits({ root })],
  ['learn', () => benchLearn({ root })],
];
// `npm run bench -- process wasm` (or BENCH=process,wasm) runs only those suites; the full run is what
// docs/benchmarks.md reports.
const only = new Set([...process.argv.slice(2), ...(process.env.BENCH ?? '').split(',')].filter(Boolean));
for (const name of only) {
  if (!suites.some(([n]) => n === name)) {
    process.stderr.write(`bench: no suite "${name}" (suites: ${suites.map(([n]) => n).join(', ')})\n`);
    process.exit(2);
  }
}
for (const [name, run] of suites) {
  if (only.size > 0 && !only.has(name)) continue;
  process.stderr.write(`bench: ${name}…\n`);
  rows.push(...(await run()));
}

const byName = new Map(rows.map((r) => [r.name, r]));
const fmt = (n) => (n === undefined ? '' : n >= 100 ? n.toFixed(0) : n >= 1 ? n.toFixed(2) : n.toFixed(3));
const width = Math.max(...rows.map((r) => r.name.length));
let out = `${'measurement'.padEnd(width)}  ${'median ms'.padStart(10)}  ${'p95 ms'.padStart(10)}  ratio vs floor (or capsule ÷ peer)\n`;
for (const r of rows) {
  const floor = r.floor ? byName.get(r.floor) : undefined;
  // A peer row (another tool doing the same job): capsule ÷ peer.
  const peer = r.peer ? byName.get(r.peer) : undefined;
  if (peer) r.ratioToPeer = r.median / peer.median;
  const ratio = peer
    ? `${(r.median / peer.median).toFixed(2)}× the peer`
    : floor
      ? `${(r.median / floor.median).toFixed(2)}×${r.perSecond ? ` (${Math.round(r.perSecond)}/s)` : ''}`
      : r.perSecond
        ? `${Math.round(r.perSecond)}/s`
        : r.isFloor
          ? r.name.startsWith('peers: ')
            ? '(peer)'
            : '(floor)'
          : '-';
  r.ratio = floor ? r.median / floor.median : undefined;
  out += `${r.name.padEnd(width)}  ${fmt(r.median).padStart(10)}  ${fmt(r.p95).padStart(10)}  ${ratio}\n`;
}
process.stdout.write(out);
await mkdir(path.join(root, 'bench', 'results'), { recursive: true });
const file = path.join(root, 'bench', 'results', `${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
await writeFile(
  file,
  JSON.stringify({ date: new Date().toISOString(), node: process.version, rows }, null, 2),
);
process.stderr.write(`bench: wrote ${path.relative(root, file)}\n`);
