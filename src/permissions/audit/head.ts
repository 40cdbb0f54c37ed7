/**
 * The head of an audit log: record count, last hash and size, kept outside the project and authenticated
 * with the per-user key, so a cut, emptied or rewritten log no longer matches it.
 */
import { closeSync, fstatSync, ftruncateSync, openSync, writeSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { writeFileAtomic } from '../../base/atomic-write.js';
import type { StateKey } from '../../project/state-key.js';
import { parseStrictJson } from '../../base/strict-json.js';
import { HEX64 } from './record.js';
import type { AuditProblemKind } from './chain.js';
import { readOptionalFile } from '../../base/optional-file.js';

const auditHeadBodySchema = z
  .strictObject({
    schemaVersion: z.literal(2),
    projectRoot: z.string().describe('For people: the project whose log this anchors.'),
    log: z.string().describe('For people: the log file.'),
    records: z.int().min(0).describe('How many records the log held after the last append.'),
    lastHash: z.string().regex(HEX64).describe('The hash of its last record (GENESIS_HASH when empty).'),
    size: z
      .int()
      .min(0)
      .optional()
      .describe(
        'Size of the log in bytes after the last append, so records other writers added after it are read without reading the whole log (absent in heads of earlier capsules).',
      ),
    updated: z.string(),
    pending: z
      .strictObject({
        from: z.int().min(0).describe('Size of the log in bytes before the batch.'),
        to: z.int().min(0).describe('Size of the log in bytes once the whole batch is written.'),
        records: z.int().min(0).describe('Records in the log once the whole batch is written.'),
        lastHash: z.string().regex(HEX64).describe('The hash of the last record of the batch.'),
      })
      .optional()
      .describe(
        'A batch being written: announced before its write and cleared after it, so a process killed in between is told apart from records capsule did not write.',
      ),
  })
  .describe('The head of an audit log: kept outside the project so a cut, deleted or rewritten log shows.');

const auditHeadSchema = auditHeadBodySchema.extend({
  mac: z
    .string()
    .optional()
    .describe("HMAC-SHA256 with the per-user key (StateKey) of every other field, for this file's name."),
});

export type AuditHead = z.infer<typeof auditHeadBodySchema>;

/** A log's head file and the key that authenticates it. */
export interface AuditHeadRef {
  /** auditHeadPath(stateDir, projectRoot) */
  file: string;
  key: StateKey;
}

export const HEAD_MAC_PURPOSE = 'audit-head';

/**
 * The name a state folder writes into each of its records: derived from its key, so two folders (two
 * users, sudo, a container, another XDG_STATE_HOME) never share one, and it tells nothing of the key.
 */
export async function writerId(key: StateKey): Promise<string> {
  const mac = await key.sign('audit-writer', 'writer', {});
  const hex = mac.slice(mac.indexOf(':') + 1);
  return hex.slice(0, 16);
}

export type HeadRead =
  | { found: true; head: AuditHead }
  | { found: false }
  | { found: false; broken: string; kind: AuditProblemKind };

/** A head is one only when capsule wrote it with this user's key for this file (never a copy). */
export async function readHead(ref: AuditHeadRef): Promise<HeadRead> {
  let text: string | undefined;
  try {
    text = await readOptionalFile(ref.file, 'utf8');
  } catch (err) {
    return {
      found: false,
      kind: 'unanchored',
      broken: `cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
    };
  }
  if (text === undefined) return { found: false };
  const json = parseStrictJson(text);
  if (json.ok && (json.value as { schemaVersion?: unknown } | null)?.schemaVersion === 1) {
    return {
      found: false,
      kind: 'unauthenticated',
      broken:
        'was written by an earlier capsule, before audit heads were authenticated, so it cannot be told from a forgery',
    };
  }
  const parsed = json.ok ? auditHeadSchema.safeParse(json.value) : undefined;
  if (parsed?.success !== true)
    return { found: false, kind: 'unanchored', broken: 'is not a valid audit head' };
  const { mac, ...head } = parsed.data;
  if (!(await ref.key.verify(HEAD_MAC_PURPOSE, path.basename(ref.file), head, mac))) {
    return {
      found: false,
      kind: 'forged',
      broken: `was not written by capsule for this project: its MAC does not verify with this user's key (${ref.key.file}), so the head and the log it names may both be forged`,
    };
  }
  return { found: true, head };
}

/** A head is one page, padded with spaces (valid JSON whitespace), so it can be overwritten in place. */
const HEAD_BYTES = 4096;

/**
 * Overwrite the head in place with one page-sized write at offset 0: a killed process leaves the old
 * page or the new one (a single write into the page cache is not interrupted halfway), and it costs a
 * fraction of a create-and-rename per append. A first head, or one too long for a page, is written
 * beside and renamed over.
 */
export async function writeHeadFile(file: string, text: string, checkSize: boolean): Promise<void> {
  const page = `${text}\n`;
  const length = Buffer.byteLength(page);
  if (length > HEAD_BYTES) return writeFileAtomic(file, page, 0o600);
  const bytes = Buffer.alloc(HEAD_BYTES, 0x20);
  bytes.write(page, 0, 'utf8');
  bytes[HEAD_BYTES - 1] = 0x0a;
  // Synchronous: a page into the page cache takes microseconds, less than a trip through the thread
  // pool, and it is done twice per batch while every waiting decision waits for it.
  let fd: number;
  try {
    fd = openSync(file, 'r+');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      return writeFileAtomic(file, bytes.toString('utf8'), 0o600);
    throw err;
  }
  try {
    const bytesWritten = writeSync(fd, bytes, 0, HEAD_BYTES, 0);
    if (bytesWritten !== HEAD_BYTES) throw new Error(`short write to ${file}`);
    // A longer head from before (written by rename) would leave bytes after the page.
    if (checkSize && fstatSync(fd).size !== HEAD_BYTES) ftruncateSync(fd, HEAD_BYTES);
  } finally {
    closeSync(fd);
  }
}
