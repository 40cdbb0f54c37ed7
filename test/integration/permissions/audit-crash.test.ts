import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../helpers/cli.js';
import { eventually } from '../../helpers/eventually.js';
import type * as AuditVerifyModule from '../../../src/permissions/audit/verify.js';
import type * as AuditWriterModule from '../../../src/permissions/audit/writer.js';
import type * as AuditPathsModule from '../../../src/project/audit-paths.js';
import type * as StateKeyModule from '../../../src/project/state-key.js';

/** The state folder's key, from the built module the acting processes use too. */
async function keyOf(stateDir: string): Promise<StateKeyModule.StateKey> {
  const { StateKey } = (await import(pathToFileURL(KEY_MODULE).href)) as typeof StateKeyModule;
  return new StateKey({ stateDir });
}

const DIST = path.join(REPO_ROOT, 'dist', 'permissions');
const KEY_MODULE = path.join(REPO_ROOT, 'dist', 'project', 'state-key.js');

/** The built verifier and head path, as the crashing children load them. */
async function builtAudit(): Promise<
  Pick<typeof AuditVerifyModule, 'verifyAuditLog'> & Pick<typeof AuditPathsModule, 'auditHeadPath'>
> {
  const [{ verifyAuditLog }, { auditHeadPath }] = await Promise.all([
    import(pathToFileURL(path.join(DIST, 'audit', 'verify.js')).href) as Promise<typeof AuditVerifyModule>,
    import(pathToFileURL(path.join(REPO_ROOT, 'dist', 'project', 'audit-paths.js')).href) as Promise<
      typeof AuditPathsModule
    >,
  ]);
  return { verifyAuditLog, auditHeadPath };
}

/**
 * The acting process: many concurrent callers, each asks the gate (with the hash-chained audit log and
 * its head) and acts on the allow by creating a marker file named after the decision. It never stops
 * by itself: the test kills it.
 */
const CHILD = `
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
const { PermissionEngine } = await import(${JSON.stringify(pathToFileURL(path.join(DIST, 'engine.js')).href)});
const { createNonInteractivePrompter } = await import(${JSON.stringify(pathToFileURL(path.join(DIST, 'prompter.js')).href)});
const { JsonlAuditLog } = await import(${JSON.stringify(pathToFileURL(path.join(DIST, 'audit', 'writer.js')).href)});
const { StateKey } = await import(${JSON.stringify(pathToFileURL(path.join(KEY_MODULE)).href)});
const [root, headFile, markers, prefix, stateDir] = process.argv.slice(2);
await mkdir(markers, { recursive: true });
const engine = await PermissionEngine.create({
  projectRoot: root,
  config: { schemaVersion: 1, mode: 'default', roots: ['capabilities'], allowlist: {}, permissions: { allow: [], deny: [] } },
  sessionGrants: ['run_capability:*'],
  prompter: createNonInteractivePrompter(),
  audit: new JsonlAuditLog(path.join(root, '.capsule', 'audit.jsonl'), { now: () => Date.now() }, { head: { file: headFile, key: new StateKey({ stateDir }) }, projectRoot: root }),
});
let next = 0;
async function caller() {
  for (;;) {
    const name = prefix + '-' + next++;
    const d = await engine.check({
      tool: 'run_capability',
      kind: 'OTHER',
      key: { tool: 'run_capability', action: name, raw: 'run_capability:' + name, compound: false },
      subject: name,
      sandboxed: true,
      contentHash: 'sha256:' + 'a'.repeat(64),
    });
    if (d.outcome === 'allow') await writeFile(path.join(markers, name), '');
  }
}
process.stdout.write('ready\\n');
await Promise.all(Array.from({ length: 48 }, caller));
`;

function randomBetween(min: number, max: number): number {
  return min + Math.floor(Math.random() * (max - min));
}

/** How many decisions a process acted on so far (its marker folder may not exist yet). */
const count = async (markers: string): Promise<number> =>
  existsSync(markers) ? (await readdir(markers)).length : 0;

/** Run the acting process until some markers exist, then SIGKILL it at a random point. */
async function actAndKill(script: string, args: string[], markers: string): Promise<void> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the acting process exited early (${code})`)));
  });
  await eventually(async () => (await count(markers)) > 0, 'the acting process to act', {
    timeoutMs: 60_000,
  });
  // Where it is killed is random (the point of the test), counted from its first act.
  await new Promise((r) => setTimeout(r, randomBetween(5, 400)));
  child.kill('SIGKILL');
  await exited;
}

/** Start the acting process; resolves once it is deciding. */
async function startActing(script: string, args: string[]): Promise<{ kill: () => Promise<void> }> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the acting process exited early (${code})`)));
  });
  return {
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Keys of the complete records of the log (a torn final fragment is not a record). */
async function recordedKeys(log: string): Promise<Set<string>> {
  const text = await readFile(log, 'utf8');
  const keys = new Set<string>();
  for (const line of text.split('\n').slice(0, -1)) {
    const key = (JSON.parse(line) as { key: string; decision: string }).key;
    keys.add(key);
  }
  return keys;
}

describe('audit log under a kill (write before acting)', () => {
  it('every decision that was acted on is in the log, and the log is intact or torn at its end only', async () => {
    const root = await mkdtemp(path.join(tmpdir(), 'capsule-audit-crash-'));
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-audit-crash-state-'));
    try {
      await mkdir(path.join(root, '.capsule'), { recursive: true });
      const script = path.join(state, 'act.mjs');
      await writeFile(script, CHILD);
      const { verifyAuditLog, auditHeadPath } = await builtAudit();
      const headFile = await auditHeadPath(state, root);
      const head = { file: headFile, key: await keyOf(state) };
      const log = path.join(root, '.capsule', 'audit.jsonl');
      let acted = 0;
      // Several kills, each at a random point, each followed by a new process on the same log
      // (which repairs what the kill left, if anything, before it appends).
      for (let round = 0; round < 8; round++) {
        const markers = path.join(root, `markers-${round}`);
        await actAndKill(script, [root, headFile, markers, `r${round}`, state], markers);
        const done = await readdir(markers);
        acted += done.length;
        const keys = await recordedKeys(log);
        const missing = done.filter((name) => !keys.has(`run_capability:${name}`));
        expect(missing).toEqual([]);
        const verdict = await verifyAuditLog(log, { head });
        expect(verdict.ok || verdict.kind === 'torn', verdict.ok ? '' : verdict.problem).toBe(true);
      }
      expect(acted).toBeGreaterThan(0);
      // A last writer takes over whatever the final kill left and the chain verifies whole.
      const { JsonlAuditLog } = (await import(
        pathToFileURL(path.join(DIST, 'audit', 'writer.js')).href
      )) as typeof AuditWriterModule;
      await new JsonlAuditLog(log, { now: () => Date.now() }, { head }).append({
        tool: 'run_capability',
        key: 'run_capability:after',
        decision: 'deny',
        source: 'no-prompt',
        reason: 'after the kills',
        mode: 'default',
      });
      expect(await verifyAuditLog(log, { head })).toMatchObject({ ok: true, anchored: true });
    } finally {
      await rm(root, { recursive: true, force: true });
      await rm(state, { recursive: true, force: true });
    }
  });

  it('two processes on one log, one killed while the other goes on: nothing acted on is lost', async () => {
    const root = await mkdtemp(path.join(tmpdir(), 'capsule-audit-crash2-'));
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-audit-crash2-state-'));
    try {
      await mkdir(path.join(root, '.capsule'), { recursive: true });
      const script = path.join(state, 'act.mjs');
      await writeFile(script, CHILD);
      const { verifyAuditLog, auditHeadPath } = await builtAudit();
      const headFile = await auditHeadPath(state, root);
      const head = { file: headFile, key: await keyOf(state) };
      const log = path.join(root, '.capsule', 'audit.jsonl');
      for (let round = 0; round < 3; round++) {
        const markersA = path.join(root, `a-${round}`);
        const markersB = path.join(root, `b-${round}`);
        const a = await startActing(script, [root, headFile, markersA, `a${round}`, state]);
        const b = await startActing(script, [root, headFile, markersB, `b${round}`, state]);
        await new Promise((r) => setTimeout(r, randomBetween(50, 400)));
        await a.kill();
        // The survivor takes the lock the dead one may have held and repairs what it left: it acts again.
        const before = await count(markersB);
        await eventually(async () => (await count(markersB)) > before, 'the survivor to act after the kill', {
          timeoutMs: 60_000,
        });
        await new Promise((r) => setTimeout(r, randomBetween(5, 400)));
        await b.kill();
        const done = [...(await readdir(markersA)), ...(await readdir(markersB))];
        const keys = await recordedKeys(log);
        expect(done.filter((name) => !keys.has(`run_capability:${name}`))).toEqual([]);
        const verdict = await verifyAuditLog(log, { head });
        expect(verdict.ok || verdict.kind === 'torn', verdict.ok ? '' : verdict.problem).toBe(true);
      }
    } finally {
      await rm(root, { recursive: true, force: true });
      await rm(state, { recursive: true, force: true });
    }
  });
});
