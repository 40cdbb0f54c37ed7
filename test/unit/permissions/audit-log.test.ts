import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
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
