import { mkdir, mkdtemp, readFile, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  auditHeadPath,
  auditLogPath,
  JsonlAuditLog,
  verifyAuditLog,
  type AuditEvent,
} from '../../../src/permissions/audit-log.js';
import { fakeClock, HASH_A, tempProject } from './helpers.js';

function event(i: number): AuditEvent {
  return {
    tool: 'run_capability',
    key: `run_capability:c${i}`,
    decision: i % 2 === 0 ? 'allow' : 'deny',
    source: 'session-allowlist',
    reason: `reason ${i}`,
    mode: 'default',
    contentHash: HASH_A,
    sandboxed: true,
  };
}

async function logWith(n: number): Promise<{ file: string; lines: string[] }> {
  const { root } = await tempProject();
  const file = auditLogPath(root);
  const log = new JsonlAuditLog(file, fakeClock());
  for (let i = 0; i < n; i++) await log.append(event(i));
  const lines = (await readFile(file, 'utf8')).trimEnd().split('\n');
  return { file, lines };
}

describe('hash-chained audit log', () => {
  it('lives at .capsule/audit.jsonl and records every field', async () => {
    const { root } = await tempProject();
    expect(auditLogPath(root)).toBe(path.join(root, '.capsule', 'audit.jsonl'));
    const { file, lines } = await logWith(3);
    expect(lines).toHaveLength(3);
    const first = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(first).toMatchObject({
      seq: 0,
      tool: 'run_capability',
      key: 'run_capability:c0',
      decision: 'allow',
    });
    expect(first).toMatchObject({ source: 'session-allowlist', contentHash: HASH_A, prev: '0'.repeat(64) });
    expect(typeof first.time).toBe('string');
    expect(await verifyAuditLog(file)).toMatchObject({ ok: true, records: 3 });
  });

  it('detects an edited line', async () => {
    const { file, lines } = await logWith(5);
    lines[2] = (lines[2] as string).replace('"allow"', '"deny"');
    await writeFile(file, `${lines.join('\n')}\n`);
    expect(await verifyAuditLog(file)).toMatchObject({ ok: false, line: 3 });
  });

  it('detects a deleted line', async () => {
    const { file, lines } = await logWith(5);
    lines.splice(1, 1);
    await writeFile(file, `${lines.join('\n')}\n`);
    expect(await verifyAuditLog(file)).toMatchObject({ ok: false, line: 2 });
  });

  it('detects reordered lines', async () => {
    const { file, lines } = await logWith(5);
    [lines[3], lines[4]] = [lines[4] as string, lines[3] as string];
    await writeFile(file, `${lines.join('\n')}\n`);
    expect(await verifyAuditLog(file)).toMatchObject({ ok: false, line: 4 });
  });

  it('detects a forged line whose hash was recomputed but whose prev was not', async () => {
    const { file, lines } = await logWith(3);
    const forged = JSON.parse(lines[1] as string) as Record<string, unknown>;
    forged.prev = 'f'.repeat(64);
    lines[1] = JSON.stringify(forged);
    await writeFile(file, `${lines.join('\n')}\n`);
    expect((await verifyAuditLog(file)).ok).toBe(false);
  });

  it('concurrent appends in one process are serialized into one valid chain', async () => {
    const { root } = await tempProject();
    const file = auditLogPath(root);
    const log = new JsonlAuditLog(file, fakeClock());
    await Promise.all(Array.from({ length: 100 }, (_, i) => log.append(event(i))));
    expect(await verifyAuditLog(file)).toMatchObject({ ok: true, records: 100 });
  });

  it('two writers on one file (as two processes would be) keep one chain', async () => {
    const { root } = await tempProject();
    const file = auditLogPath(root);
    const a = new JsonlAuditLog(file, fakeClock());
    const b = new JsonlAuditLog(file, fakeClock());
    await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? a : b).append(event(i))));
    expect(await verifyAuditLog(file)).toMatchObject({ ok: true, records: 60 });
  });

  it('refuses to extend a log whose last line is broken', async () => {
    const { file, lines } = await logWith(2);
    await writeFile(file, `${lines.join('\n')}\n{"half":`);
    const log = new JsonlAuditLog(file, fakeClock());
    await expect(log.append(event(9))).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
  });

  it('a missing log verifies as empty', async () => {
    const { root } = await tempProject();
    expect(await verifyAuditLog(auditLogPath(root))).toMatchObject({ ok: true, records: 0 });
  });
});

describe('audit log failures', () => {
  it('an unwritable log is AUDIT_BROKEN naming the file (fail closed)', async () => {
    const { root } = await tempProject();
    await mkdir(path.join(root, '.capsule', 'audit.jsonl'), { recursive: true }); // a folder where the file should be
    const log = new JsonlAuditLog(auditLogPath(root), fakeClock());
    await expect(log.append(event(0))).rejects.toMatchObject({
      code: 'AUDIT_BROKEN',
      details: { file: auditLogPath(root) },
    });
  });
});

describe('the head outside the project', () => {
  async function anchored(): Promise<{ root: string; file: string; headFile: string; log: JsonlAuditLog }> {
    const { root } = await tempProject();
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
    const headFile = await auditHeadPath(state, root);
    const file = auditLogPath(root);
    return { root, file, headFile, log: new JsonlAuditLog(file, fakeClock(), { headFile }) };
  }

  it('is keyed by the real path of the project root, outside it', async () => {
    const { root } = await tempProject();
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
    const link = path.join(await mkdtemp(path.join(tmpdir(), 'capsule-link-')), 'p');
    await symlink(root, link);
    expect(await auditHeadPath(state, link)).toBe(await auditHeadPath(state, root));
    expect((await auditHeadPath(state, root)).startsWith(state)).toBe(true);
  });

  it('two writers with one head keep one chain that matches it', async () => {
    const { file, headFile } = await anchored();
    const a = new JsonlAuditLog(file, fakeClock(), { headFile });
    const b = new JsonlAuditLog(file, fakeClock(), { headFile });
    await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a : b).append(event(i))));
    expect(await verifyAuditLog(file, { headFile })).toMatchObject({ ok: true, records: 40, anchored: true });
    const head = JSON.parse(await readFile(headFile, 'utf8')) as { records: number };
    expect(head.records).toBe(40);
  });

  it('a cut log is not extended (AUDIT_BROKEN), by this writer or a fresh one', async () => {
    const { file, headFile, log } = await anchored();
    for (let i = 0; i < 4; i++) await log.append(event(i));
    const lines = (await readFile(file, 'utf8')).split('\n');
    await writeFile(file, `${lines.slice(0, 2).join('\n')}\n`);
    await expect(log.append(event(9))).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    const fresh = new JsonlAuditLog(file, fakeClock(), { headFile });
    await expect(fresh.append(event(9))).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    expect(await verifyAuditLog(file, { headFile })).toMatchObject({
      ok: false,
      kind: 'truncated',
      records: 2,
    });
  });

  it('a log that never had a head is reported unanchored, then anchored by the next append with a note', async () => {
    const { root } = await tempProject();
    const file = auditLogPath(root);
    const plain = new JsonlAuditLog(file, fakeClock());
    for (let i = 0; i < 3; i++) await plain.append(event(i));
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
    const headFile = await auditHeadPath(state, root);
    expect(await verifyAuditLog(file, { headFile })).toMatchObject({ ok: false, kind: 'unanchored' });
    await new JsonlAuditLog(file, fakeClock(), { headFile }).append(event(3));
    expect(await verifyAuditLog(file, { headFile })).toMatchObject({
      ok: true,
      records: 5,
      anchored: true,
      anchoredFrom: 3,
    });
    expect(await readFile(file, 'utf8')).toContain('had no head');
  });

  it('a head that is not a valid head is reported, and blocks appends', async () => {
    const { file, headFile, log } = await anchored();
    await log.append(event(0));
    await writeFile(headFile, '{"schemaVersion": 1, "records": 1, "records": 0}');
    expect(await verifyAuditLog(file, { headFile })).toMatchObject({ ok: false, kind: 'unanchored' });
    await expect(new JsonlAuditLog(file, fakeClock(), { headFile }).append(event(1))).rejects.toMatchObject({
      code: 'AUDIT_BROKEN',
    });
  });

  it('lines capsule wrote before byte-exact hashing still verify (same serialization)', async () => {
    const { file, lines } = await logWith(3);
    expect(lines[0]).toMatch(
      /^\{"seq":0,"time":"[^"]+","tool":"run_capability",.*,"prev":"0{64}","hash":"[0-9a-f]{64}"\}$/,
    );
    expect(await verifyAuditLog(file)).toMatchObject({ ok: true, records: 3, anchored: false });
  });

  it('a kill between the append and the head update is reported (extra) and not extended', async () => {
    const { file, headFile, log } = await anchored();
    for (let i = 0; i < 3; i++) await log.append(event(i));
    const headBefore = await readFile(headFile);
    await log.append(event(3));
    await writeFile(headFile, headBefore); // the head as it was before the last append
    expect(await verifyAuditLog(file, { headFile })).toMatchObject({ ok: false, kind: 'extra', records: 4 });
    await expect(new JsonlAuditLog(file, fakeClock(), { headFile }).append(event(4))).rejects.toMatchObject({
      code: 'AUDIT_BROKEN',
    });
  });

  it('never appends through a symlink planted where the log should be', async () => {
    const { root } = await tempProject();
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
    const target = path.join(await mkdtemp(path.join(tmpdir(), 'capsule-victim-')), 'victim.txt');
    await mkdir(path.join(root, '.capsule'), { recursive: true });
    await symlink(target, auditLogPath(root));
    const log = new JsonlAuditLog(auditLogPath(root), fakeClock(), {
      headFile: await auditHeadPath(state, root),
    });
    await expect(log.append(event(0))).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    await expect(readFile(target)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a fresh writer finds the tail of a long log whose last record spans several reads', async () => {
    const { file, headFile, log } = await anchored();
    for (let i = 0; i < 50; i++) await log.append(event(i));
    await log.append({ ...event(50), reason: 'r'.repeat(40_000) });
    const fresh = new JsonlAuditLog(file, fakeClock(), { headFile });
    await fresh.append(event(51));
    expect(await verifyAuditLog(file, { headFile })).toMatchObject({ ok: true, records: 52 });
  });
});
