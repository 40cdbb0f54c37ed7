import { mkdir, mkdtemp, readFile, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { JsonlAuditLog } from '../../../../src/permissions/audit/writer.js';
import { verifyAuditLog } from '../../../../src/permissions/audit/verify.js';
import type { AuditEvent } from '../../../../src/permissions/audit/record.js';
import type { AuditHeadRef } from '../../../../src/permissions/audit/head.js';
import { auditHeadPath, auditLogPath } from '../../../../src/project/audit-paths.js';
import { StateKey } from '../../../../src/project/state-key.js';
import { fakeClock, HASH_A, tempProject } from '../helpers.js';

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

/** Write a head as capsule does (signed with `key`): for states only a killed writer leaves. */
async function writeSignedHead(head: AuditHeadRef, body: Record<string, unknown>): Promise<void> {
  const { mac: _old, ...rest } = body;
  const mac = await head.key.sign('audit-head', path.basename(head.file), rest);
  await writeFile(head.file, JSON.stringify({ ...rest, mac }));
}

describe('the head outside the project', () => {
  async function anchored(state?: string): Promise<{
    root: string;
    file: string;
    headFile: string;
    head: AuditHeadRef;
    log: JsonlAuditLog;
  }> {
    const { root } = await tempProject();
    const stateDir = state ?? (await mkdtemp(path.join(tmpdir(), 'capsule-state-')));
    const headFile = await auditHeadPath(stateDir, root);
    const head = { file: headFile, key: new StateKey({ stateDir }) };
    const file = auditLogPath(root);
    return { root, file, headFile, head, log: new JsonlAuditLog(file, fakeClock(), { head }) };
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
    const { file, headFile, head } = await anchored();
    const a = new JsonlAuditLog(file, fakeClock(), { head });
    const b = new JsonlAuditLog(file, fakeClock(), { head });
    await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a : b).append(event(i))));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: true, records: 40, anchored: true });
    const written = JSON.parse(await readFile(headFile, 'utf8')) as { records: number };
    expect(written.records).toBe(40);
  });

  it('a cut log is not extended (AUDIT_BROKEN), by this writer or a fresh one', async () => {
    const { file, head, log } = await anchored();
    for (let i = 0; i < 4; i++) await log.append(event(i));
    const lines = (await readFile(file, 'utf8')).split('\n');
    await writeFile(file, `${lines.slice(0, 2).join('\n')}\n`);
    await expect(log.append(event(9))).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    const fresh = new JsonlAuditLog(file, fakeClock(), { head });
    await expect(fresh.append(event(9))).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    expect(await verifyAuditLog(file, { head })).toMatchObject({
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
    const head = { file: await auditHeadPath(state, root), key: new StateKey({ stateDir: state }) };
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: false, kind: 'unanchored' });
    await new JsonlAuditLog(file, fakeClock(), { head }).append(event(3));
    expect(await verifyAuditLog(file, { head })).toMatchObject({
      ok: true,
      records: 5,
      anchored: true,
      anchoredFrom: 3,
    });
    expect(await readFile(file, 'utf8')).toContain('had no head');
  });

  it('a head that is not a valid head is reported, and blocks appends', async () => {
    const { file, headFile, head, log } = await anchored();
    await log.append(event(0));
    await writeFile(headFile, '{"schemaVersion": 2, "records": 1, "records": 0}');
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: false, kind: 'unanchored' });
    await expect(new JsonlAuditLog(file, fakeClock(), { head }).append(event(1))).rejects.toMatchObject({
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

  it('records after the head that it never announced are reported (extra) and not extended', async () => {
    const { file, headFile, head, log } = await anchored();
    for (let i = 0; i < 3; i++) await log.append(event(i));
    const headBefore = await readFile(headFile);
    await log.append(event(3));
    await writeFile(headFile, headBefore); // the head as it was before the last append
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: false, kind: 'extra', records: 4 });
    await expect(new JsonlAuditLog(file, fakeClock(), { head }).append(event(4))).rejects.toMatchObject({
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
      head: { file: await auditHeadPath(state, root), key: new StateKey({ stateDir: state }) },
    });
    await expect(log.append(event(0))).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    await expect(readFile(target)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a fresh writer finds the tail of a long log whose last record spans several reads', async () => {
    const { file, head, log } = await anchored();
    for (let i = 0; i < 50; i++) await log.append(event(i));
    await log.append({ ...event(50), reason: 'r'.repeat(40_000) });
    const fresh = new JsonlAuditLog(file, fakeClock(), { head });
    await fresh.append(event(51));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: true, records: 52 });
  });

  async function recordsOf(file: string): Promise<Array<{ key: string; reason: string }>> {
    return (await readFile(file, 'utf8'))
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as { key: string; reason: string });
  }

  /** What a writer killed during a batch leaves: the head announcing the batch, and some of it on disk. */
  async function killedDuringBatch(): Promise<{
    file: string;
    head: AuditHeadRef;
    before: Buffer;
    after: Buffer;
  }> {
    const { file, headFile, head, log } = await anchored();
    for (let i = 0; i < 3; i++) await log.append(event(i));
    const before = await readFile(file);
    const committed = JSON.parse(await readFile(headFile, 'utf8')) as Record<string, unknown>;
    for (let i = 3; i < 7; i++) await log.append(event(i));
    const after = await readFile(file);
    const done = JSON.parse(await readFile(headFile, 'utf8')) as { lastHash: string };
    const pending = { from: before.length, to: after.length, records: 7, lastHash: done.lastHash };
    await writeSignedHead(head, { ...committed, pending });
    return { file, head, before, after };
  }

  it('group commit: concurrent appends share writes, and every one is in one chain that matches the head', async () => {
    const { file, headFile, head, log } = await anchored();
    await Promise.all(Array.from({ length: 300 }, (_, i) => log.append(event(i))));
    expect(await verifyAuditLog(file, { head })).toMatchObject({
      ok: true,
      records: 300,
      anchored: true,
    });
    const written = JSON.parse(await readFile(headFile, 'utf8')) as { records: number; pending?: unknown };
    expect(written).toMatchObject({ records: 300 });
    expect(written.pending).toBeUndefined();
  });

  it('a kill after a batch was written whole but before the head said so verifies, and is extended', async () => {
    const { file, head, after } = await killedDuringBatch();
    await writeFile(file, after);
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: true, records: 7 });
    await new JsonlAuditLog(file, fakeClock(), { head }).append(event(7));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: true, records: 8 });
  });

  it('a kill in the middle of a batch is torn; the next append cuts the batch back and says so', async () => {
    const { file, head, before, after } = await killedDuringBatch();
    // Two whole records of the batch and part of a third.
    const lines = after.subarray(before.length).toString('utf8').split('\n');
    const part = `${lines[0]}\n${lines[1]}\n${(lines[2] ?? '').slice(0, 50)}`;
    await writeFile(file, Buffer.concat([before, Buffer.from(part)]));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: false, kind: 'torn' });
    await new JsonlAuditLog(file, fakeClock(), { head }).append(event(9));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: true, records: 5 });
    const records = await recordsOf(file);
    expect(records.map((r) => r.key)).toEqual([
      'run_capability:c0',
      'run_capability:c1',
      'run_capability:c2',
      'audit:log',
      'run_capability:c9',
    ]);
    expect(records[3]?.reason).toContain('cut short by a crash');
  });

  it('records appended after the head that are not the batch it announced are not adopted', async () => {
    const { file, head, before } = await killedDuringBatch();
    // Someone else's self-consistent records where the batch should be (the same length as one would be).
    const forger = await anchored();
    for (let i = 0; i < 3; i++) await forger.log.append(event(i));
    for (let i = 3; i < 7; i++) await forger.log.append({ ...event(i), decision: 'allow', reason: 'forged' });
    const forged = (await readFile(forger.file)).subarray(before.length);
    await writeFile(file, Buffer.concat([before, forged]));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: false });
    // Shorter than the batch: removed as a cut batch, and the removal is on record.
    await new JsonlAuditLog(file, fakeClock(), { head }).append(event(9));
    const records = await recordsOf(file);
    expect(records.filter((r) => r.reason === 'forged')).toEqual([]);
    expect(records.at(-2)?.reason).toContain('cut short by a crash');
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: true, records: 5 });
  });

  it('records past the end of the batch the head announced are not adopted', async () => {
    const { file, head, after } = await killedDuringBatch();
    const extra = after.subarray(after.lastIndexOf(10, after.length - 2) + 1);
    await writeFile(file, Buffer.concat([after, extra]));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: false });
    await expect(new JsonlAuditLog(file, fakeClock(), { head }).append(event(9))).rejects.toMatchObject({
      code: 'AUDIT_BROKEN',
    });
  });
  it('a head whose fields were changed (its MAC kept) is forged: reported, and never extended', async () => {
    const { file, headFile, head, log } = await anchored();
    for (let i = 0; i < 3; i++) await log.append(event(i));
    // Cut the last record and make the head say so, as someone who cannot read the key would.
    const lines = (await readFile(file, 'utf8')).trimEnd().split('\n');
    await writeFile(file, `${lines.slice(0, 2).join('\n')}\n`);
    const last = (JSON.parse(lines[1] as string) as { hash: string }).hash;
    const old = JSON.parse(await readFile(headFile, 'utf8')) as Record<string, unknown>;
    await writeFile(headFile, JSON.stringify({ ...old, records: 2, lastHash: last }));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: false, kind: 'forged' });
    await expect(new JsonlAuditLog(file, fakeClock(), { head }).append(event(3))).rejects.toMatchObject({
      code: 'AUDIT_BROKEN',
    });
    // Control: the same head signed with the key is accepted (the MAC is what refused it).
    await writeSignedHead(head, { ...old, records: 2, lastHash: last });
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: true, records: 2 });
  });

  it('a genuine head verified with another key, or copied to another project, is forged', async () => {
    const a = await anchored();
    await a.log.append(event(0));
    const otherKey = new StateKey({ stateDir: await mkdtemp(path.join(tmpdir(), 'capsule-state-')) });
    expect(await verifyAuditLog(a.file, { head: { ...a.head, key: otherKey } })).toMatchObject({
      ok: false,
      kind: 'forged',
    });
    const b = await anchored(path.dirname(path.dirname(a.headFile)));
    await mkdir(path.dirname(b.file), { recursive: true });
    await writeFile(b.file, await readFile(a.file));
    await writeFile(b.headFile, await readFile(a.headFile));
    expect(await verifyAuditLog(b.file, { head: b.head })).toMatchObject({ ok: false, kind: 'forged' });
    expect(await verifyAuditLog(a.file, { head: a.head })).toMatchObject({ ok: true, records: 1 });
  });

  it('a head of an earlier capsule (no MAC) is unauthenticated until a person resets the log', async () => {
    const { file, headFile, head, log } = await anchored();
    for (let i = 0; i < 2; i++) await log.append(event(i));
    const { mac: _mac, ...old } = JSON.parse(await readFile(headFile, 'utf8')) as Record<string, unknown>;
    await writeFile(headFile, JSON.stringify({ ...old, schemaVersion: 1 }));
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: false, kind: 'unauthenticated' });
    await expect(new JsonlAuditLog(file, fakeClock(), { head }).append(event(2))).rejects.toMatchObject({
      code: 'AUDIT_BROKEN',
    });
    await new JsonlAuditLog(file, fakeClock(), { head }).reset('a person looked');
    expect(await verifyAuditLog(file, { head })).toMatchObject({ ok: true, records: 1 });
    expect(await readFile(file, 'utf8')).toContain('before audit heads were authenticated');
  });
});
