import { createHash } from 'node:crypto';
import { chown, link, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { JsonlAuditLog } from '../../../../src/permissions/audit/writer.js';
import { verifyAuditLog } from '../../../../src/permissions/audit/verify.js';
import { writerId, type AuditHeadRef } from '../../../../src/permissions/audit/head.js';
import type { AuditEvent } from '../../../../src/permissions/audit/record.js';
import { auditHeadPath, auditLogPath } from '../../../../src/project/audit-paths.js';
import { StateKey } from '../../../../src/project/state-key.js';
import { fakeClock, tempProject } from '../helpers.js';
import { forgeChain } from '../../../helpers/audit-forgery.js';

/**
 * One log, several honest state folders (two users, sudo, a container, another XDG_STATE_HOME):
 * each folder's head covers what it wrote; what the others wrote is named, not taken for tampering;
 * a cut or a rewrite is still caught by whichever head covers it.
 */
function event(i: number): AuditEvent {
  return {
    tool: 'run_command',
    key: `run_command:touch f${i}`,
    decision: 'deny',
    source: 'no-prompt',
    reason: `reason ${i}`,
    mode: 'default',
  };
}

interface Folder {
  head: AuditHeadRef;
  /** A new writer each time, as a new process would be. */
  append: (i: number) => Promise<void>;
  verify: () => ReturnType<typeof verifyAuditLog>;
  id: () => Promise<string>;
}

async function sharedLog(): Promise<{ file: string; a: Folder; b: Folder }> {
  const { root } = await tempProject();
  const file = auditLogPath(root);
  const folder = async (): Promise<Folder> => {
    const stateDir = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
    const head = { file: await auditHeadPath(stateDir, root), key: new StateKey({ stateDir }) };
    return {
      head,
      append: (i) => new JsonlAuditLog(file, fakeClock(), { head, projectRoot: root }).append(event(i)),
      verify: () => verifyAuditLog(file, { head }),
      id: () => writerId(head.key),
    };
  };
  return { file, a: await folder(), b: await folder() };
}

async function records(file: string): Promise<Array<Record<string, unknown>>> {
  return (await readFile(file, 'utf8'))
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** A, B, A, B: each append lands; returns the log's records. */
async function abab(): Promise<{ file: string; a: Folder; b: Folder }> {
  const shared = await sharedLog();
  await shared.a.append(0);
  await shared.b.append(1);
  await shared.a.append(2);
  await shared.b.append(3);
  return shared;
}

describe('an audit log shared by several state folders', () => {
  it('A, B, A, B: every append lands, and each folder verifies, naming the records of the other', async () => {
    const { file, a, b } = await abab();
    const list = await records(file);
    // B's first append says where its records begin; every record names its writer.
    expect(list.map((r) => r.key)).toEqual([
      'run_command:touch f0',
      'audit:anchor',
      'run_command:touch f1',
      'run_command:touch f2',
      'run_command:touch f3',
    ]);
    const [ida, idb] = [await a.id(), await b.id()];
    expect(ida).not.toBe(idb);
    expect(list.map((r) => r.writer)).toEqual([ida, idb, idb, ida, idb]);
    expect(await a.verify()).toMatchObject({
      ok: true,
      records: 5,
      anchoredFrom: 0,
      writer: ida,
      foreign: [
        { writer: idb, from: 1, to: 2, afterHead: false },
        { writer: idb, from: 4, to: 4, afterHead: true },
      ],
    });
    expect(await b.verify()).toMatchObject({
      ok: true,
      records: 5,
      anchoredFrom: 1,
      foreign: [
        { writer: ida, from: 0, to: 0, afterHead: false },
        { writer: ida, from: 3, to: 3, afterHead: false },
      ],
    });
    // A third round goes on working.
    await a.append(4);
    await b.append(5);
    expect((await a.verify()).ok && (await b.verify()).ok).toBe(true);
  });

  it('concurrent writers from two folders (one process each, interleaved) keep one chain both verify', async () => {
    const { file, a, b } = await sharedLog();
    const wa = new JsonlAuditLog(file, fakeClock(), { head: a.head });
    const wb = new JsonlAuditLog(file, fakeClock(), { head: b.head });
    await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? wa : wb).append(event(i))));
    const va = await a.verify();
    const vb = await b.verify();
    expect(va).toMatchObject({ ok: true, records: 61 });
    expect(vb).toMatchObject({ ok: true, records: 61 });
    const decisions = (await records(file)).filter((r) => r.tool === 'run_command');
    expect(decisions).toHaveLength(60);
    expect(new Set(decisions.map((r) => r.key)).size).toBe(60);
  });

  it('a cut below a folder’s last record is caught by that folder, and it records nothing more', async () => {
    const { file, a, b } = await abab();
    const lines = (await readFile(file, 'utf8')).split('\n').filter((l) => l !== '');
    // Cut B's last record only: B's head covers it; A's does not (A wrote before it).
    await writeFile(file, `${lines.slice(0, 4).join('\n')}\n`);
    expect(await b.verify()).toMatchObject({ ok: false, kind: 'truncated' });
    await expect(b.append(9)).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    expect(await a.verify()).toMatchObject({ ok: true, records: 4 });
    // Cut A's last record too: now A's head catches it.
    await writeFile(file, `${lines.slice(0, 3).join('\n')}\n`);
    expect(await a.verify()).toMatchObject({ ok: false, kind: 'truncated' });
    await expect(a.append(9)).rejects.toMatchObject({
      code: 'AUDIT_BROKEN',
      details: { hint: expect.stringContaining('capsule audit reset') as unknown },
    });
    expect((await records(file)).length).toBe(3);
  });

  it('a rewrite of the other folder’s records, re-chained to hide it, is caught by the head covering them', async () => {
    const { file, a, b } = await abab();
    const list = await records(file);
    // Record 2 is B's, before A's last record: A's head covers it through the chain.
    list[2] = { ...list[2], decision: 'allow', reason: 'rewritten' };
    await writeFile(file, forgeChain(list));
    expect(await a.verify()).toMatchObject({ ok: false, kind: 'rewritten' });
    expect(await b.verify()).toMatchObject({ ok: false, kind: 'rewritten' });
    await expect(a.append(9)).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    await expect(b.append(9)).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
  });

  it('records that name a folder its head does not cover are forged: caught, and not chained onto', async () => {
    const { file, a, b } = await abab();
    const list = await records(file);
    const last = list.at(-1) as Record<string, unknown>;
    // A record claiming A wrote it, chained correctly after B's last one.
    const { hash: lastHash, ...lastBody } = last;
    const body = { ...lastBody, seq: 5, prev: lastHash, writer: await a.id(), key: 'run_command:rm -rf x' };
    const hash = createHash('sha256').update(JSON.stringify(body)).digest('hex');
    await writeFile(file, `${JSON.stringify({ ...body, hash })}\n`, { flag: 'a' });
    expect(await a.verify()).toMatchObject({ ok: false, kind: 'extra', line: 6 });
    await expect(a.append(9)).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
    // To B they are another folder's records after its own: named, and B goes on.
    expect(await b.verify()).toMatchObject({
      ok: true,
      foreign: expect.arrayContaining([{ writer: await a.id(), from: 5, to: 5, afterHead: true }]) as unknown,
    });
    await b.append(10);
  });

  it('a line repeated at the end is not taken for the head’s last record', async () => {
    const { file, a } = await abab();
    await a.append(4);
    const text = await readFile(file, 'utf8');
    const lastLine = text.trimEnd().split('\n').at(-1) as string;
    await writeFile(file, `${text}${lastLine}\n`);
    expect(await a.verify()).toMatchObject({ ok: false, kind: 'chain' });
    await expect(a.append(9)).rejects.toMatchObject({ code: 'AUDIT_BROKEN' });
  });

  it('a torn line another folder left (its crashed append) is cut by the next writer, and said', async () => {
    const { file, a, b } = await abab();
    await writeFile(file, '{"seq":5,"time":"', { flag: 'a' });
    await a.append(4);
    const list = await records(file);
    expect(String(list.at(-2)?.reason)).toContain('torn final line');
    expect(await a.verify()).toMatchObject({ ok: true });
    expect(await b.verify()).toMatchObject({ ok: true });
  });

  it.runIf(process.getuid?.() === 0)(
    'root gives a person the log it made in their project, but never a file linked or a folder symlinked in',
    async () => {
      const { root } = await tempProject();
      await chown(root, 65534, 65534);
      const stateDir = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
      const head = { file: await auditHeadPath(stateDir, root), key: new StateKey({ stateDir }) };
      await rm(path.join(root, '.capsule'), { recursive: true, force: true });
      await new JsonlAuditLog(auditLogPath(root), fakeClock(), { head }).append(event(0));
      expect((await stat(path.join(root, '.capsule'))).uid).toBe(65534);
      expect((await stat(auditLogPath(root))).uid).toBe(65534);
      // The project's owner links a file of root's in where the log should be.
      const victim = path.join(await mkdtemp(path.join(tmpdir(), 'capsule-victim-')), 'v');
      await writeFile(victim, '');
      await rm(auditLogPath(root));
      await link(victim, auditLogPath(root));
      await new JsonlAuditLog(auditLogPath(root), fakeClock(), { head })
        .append(event(1))
        .catch(() => undefined);
      expect((await stat(victim)).uid).toBe(0);
      // …or points .capsule at a folder of root's.
      const folderOfRoot = await mkdtemp(path.join(tmpdir(), 'capsule-rootdir-'));
      await rm(path.join(root, '.capsule'), { recursive: true, force: true });
      await symlink(folderOfRoot, path.join(root, '.capsule'));
      await new JsonlAuditLog(auditLogPath(root), fakeClock(), { head })
        .append(event(2))
        .catch(() => undefined);
      expect((await stat(folderOfRoot)).uid).toBe(0);
    },
  );
});
