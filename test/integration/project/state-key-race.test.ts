import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { StateKey } from '../../../src/project/state-key.js';
import { PolicySnapshotStore } from '../../../src/permissions/policy-snapshot.js';
import { REPO_ROOT } from '../../helpers/cli.js';
import { eventually } from '../../helpers/eventually.js';

const DIST = path.join(REPO_ROOT, 'dist');
const module = (p: string) => JSON.stringify(pathToFileURL(path.join(DIST, p)).href);

// Each process waits for the start signal, then uses the state key for the first time (creating it
// if nobody has yet), records a confirmed policy for a project of its own, and once every process has
// done so, reads all of them back.
const CHILD = `
import { existsSync, writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
const { StateKey } = await import(${module('project/state-key.js')});
const { PolicySnapshotStore } = await import(${module('permissions/policy-snapshot.js')});
const [stateDir, go, mine, count, ...roots] = process.argv.slice(2);
writeFileSync(go + '.ready-' + process.pid, '');
while (!existsSync(go)) await new Promise((r) => setTimeout(r, 1));
const key = new StateKey({ stateDir });
const store = new PolicySnapshotStore({ stateDir, key });
const view = { mode: 'default', allow: [], deny: [], allowlist: {}, profiles: {} };
await store.write(mine, view, 'race');
while ((await readdir(path.join(stateDir, 'policy'))).filter((f) => f.endsWith('.json')).length < Number(count))
  await new Promise((r) => setTimeout(r, 5));
const states = await Promise.all(roots.map(async (r) => (await store.load(r)).state));
process.stdout.write(JSON.stringify({ mac: await key.sign('audit-head', 'probe', {}), states }));
`;

function child(script: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`child exited ${code}`))));
  });
}

describe('the state key under concurrent first use', () => {
  it('processes creating it at once end with one key, and each verifies the records of the others', async () => {
    const work = await mkdtemp(path.join(tmpdir(), 'capsule-key-race-'));
    const script = path.join(work, 'child.mjs');
    await writeFile(script, CHILD);
    const N = 6;
    for (let round = 0; round < 4; round++) {
      const stateDir = path.join(work, `state-${round}`);
      const go = path.join(work, `go-${round}`);
      const roots = await Promise.all(
        Array.from({ length: N }, () => mkdtemp(path.join(tmpdir(), 'capsule-key-race-p-'))),
      );
      const runs = roots.map((mine) => child(script, [stateDir, go, mine, String(N), ...roots]));
      // Once every process has started and waits (it says so), release them together.
      await eventually(
        async () => (await readdir(work)).filter((f) => f.startsWith(`go-${round}.ready-`)).length === N,
        'every process to wait for the go',
        { timeoutMs: 60_000 },
      );
      await writeFile(go, '');
      const results = (await Promise.all(runs)).map(
        (o) => JSON.parse(o) as { mac: string; states: string[] },
      );
      expect(new Set(results.map((r) => r.mac)).size).toBe(1);
      for (const r of results) expect(r.states).toEqual(Array(N).fill('confirmed'));
      // One whole key, nothing half-made left beside it, and this process agrees with them.
      const key = new StateKey({ stateDir });
      expect(await readdir(path.dirname(key.file))).toEqual(['state.key']);
      expect((await stat(key.file)).size).toBe(32);
      expect((await readFile(key.file)).length).toBe(32);
      expect(await key.sign('audit-head', 'probe', {})).toBe(results[0]?.mac);
      const store = new PolicySnapshotStore({ stateDir, key });
      for (const r of roots) expect((await store.load(r)).state).toBe('confirmed');
    }
  }, 120_000);
});
