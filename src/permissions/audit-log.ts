import { createHash } from 'node:crypto';
import { appendFile, mkdir, open, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { withFileLock } from '../config/file-lock.js';
import { STATE_DIR } from '../config/config-store.js';
import { CapsuleError } from '../errors.js';
import type { Clock } from './session-allowlist.js';

export const AUDIT_FILE = 'audit.jsonl';
export const GENESIS_HASH = '0'.repeat(64);

/** Default audit log of a project: `<root>/.capsule/audit.jsonl`. */
export function auditLogPath(projectRoot: string): string {
  return path.join(projectRoot, STATE_DIR, AUDIT_FILE);
}

/** One decision, as the engine reports it. */
export interface AuditEvent {
  tool: string;
  key: string;
  decision: 'allow' | 'deny' | 'error';
  /** What decided: deny-rule, allow-rule, mode, project-allowlist, session-allowlist, prompt, no-prompt, … */
  source: string;
  reason: string;
  mode: string;
  /** The rule or allowlist key that decided. */
  matched?: string | undefined;
  /** The answer given at a prompt (Once, AlwaysThisSession, …). */
  answer?: string | undefined;
  contentHash?: string | undefined;
  sandboxed?: boolean | undefined;
}

/** A line of the log: the event plus its place in the chain. */
export interface AuditRecord extends AuditEvent {
  seq: number;
  time: string;
  prev: string;
  hash: string;
}

export interface AuditSink {
  append(event: AuditEvent): Promise<void>;
}

/** For tests and benchmarks: keeps events in memory. */
export class MemoryAuditSink implements AuditSink {
  readonly events: AuditEvent[] = [];
  append(event: AuditEvent): Promise<void> {
    this.events.push(event);
    return Promise.resolve();
  }
}

function hashRecord(body: Omit<AuditRecord, 'hash'>): string {
  return createHash('sha256').update(JSON.stringify(body)).digest('hex');
}

/**
 * Append-only JSONL log, each line hash-chained to the previous one:
 *   hash = sha256(JSON of the line without `hash`), and that JSON holds `prev` (the previous line's hash)
 *   and `seq` (its index). Editing, deleting or reordering any line breaks the chain at that point.
 * Appends are serialized inside the process (a promise queue) and across processes (a lock file).
 */
export class JsonlAuditLog implements AuditSink {
  private queue: Promise<unknown> = Promise.resolve();
  /** The tail we last wrote: reused when the file did not change size since (no other writer). */
  private tail: { size: number; seq: number; hash: string } | undefined;

  constructor(
    readonly file: string,
    private readonly clock: Clock,
  ) {}

  /** Fails closed: a decision that cannot be recorded is an error (AUDIT_BROKEN), not a silent gap. */
  append(event: AuditEvent): Promise<void> {
    const run = this.queue.then(() =>
      this.appendNow(event).catch((err: unknown) => {
        if (err instanceof CapsuleError) throw err;
        const code = (err as NodeJS.ErrnoException).code ?? (err instanceof Error ? err.message : 'error');
        throw new CapsuleError('AUDIT_BROKEN', `Cannot append to the audit log ${this.file} (${code}).`, {
          file: this.file,
          hint: 'capsule records every permission decision there: make the .capsule folder writable.',
        });
      }),
    );
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async appendNow(event: AuditEvent): Promise<void> {
    await mkdir(path.dirname(this.file), { recursive: true });
    await withFileLock(`${this.file}.lock`, async () => {
      const size = await fileSize(this.file);
      let last = this.tail !== undefined && this.tail.size === size ? this.tail : undefined;
      if (last === undefined) last = { size, ...(await readLastRecord(this.file, size)) };
      const body: Omit<AuditRecord, 'hash'> = {
        seq: last.seq + 1,
        time: new Date(this.clock.now()).toISOString(),
        tool: event.tool,
        key: event.key,
        decision: event.decision,
        source: event.source,
        reason: event.reason,
        mode: event.mode,
        ...(event.matched !== undefined ? { matched: event.matched } : {}),
        ...(event.answer !== undefined ? { answer: event.answer } : {}),
        ...(event.contentHash !== undefined ? { contentHash: event.contentHash } : {}),
        ...(event.sandboxed !== undefined ? { sandboxed: event.sandboxed } : {}),
        prev: last.hash,
      };
      const hash = hashRecord(body);
      const line = `${JSON.stringify({ ...body, hash })}\n`;
      await appendFile(this.file, line, { encoding: 'utf8', mode: 0o600 });
      this.tail = { size: size + Buffer.byteLength(line), seq: body.seq, hash };
    });
  }
}

async function fileSize(file: string): Promise<number> {
  try {
    return (await stat(file)).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw err;
  }
}

/** The seq and hash of the last line (reads the file from its end). An empty log is the genesis. */
async function readLastRecord(file: string, size: number): Promise<{ seq: number; hash: string }> {
  if (size === 0) return { seq: -1, hash: GENESIS_HASH };
  const handle = await open(file, 'r');
  try {
    let chunk = 4096;
    for (;;) {
      const start = Math.max(0, size - chunk);
      const buf = Buffer.alloc(size - start);
      await handle.read(buf, 0, buf.length, start);
      const text = buf.toString('utf8').replace(/\n+$/, '');
      const nl = text.lastIndexOf('\n');
      if (nl >= 0 || start === 0) {
        const lastLine = text.slice(nl + 1);
        const parsed = parseRecord(lastLine);
        if (parsed === undefined) {
          throw new CapsuleError(
            'AUDIT_BROKEN',
            `The last line of the audit log ${file} is not a valid record.`,
            {
              file,
              hint: 'Run `capsule audit verify`; move the file aside to start a new chain.',
            },
          );
        }
        return { seq: parsed.seq, hash: parsed.hash };
      }
      chunk *= 4;
    }
  } finally {
    await handle.close();
  }
}

function parseRecord(line: string): AuditRecord | undefined {
  try {
    const r = JSON.parse(line) as Partial<AuditRecord>;
    if (typeof r.seq !== 'number' || typeof r.hash !== 'string' || typeof r.prev !== 'string')
      return undefined;
    return r as AuditRecord;
  } catch {
    return undefined;
  }
}

export type AuditVerification =
  | { ok: true; records: number; lastHash: string }
  | { ok: false; records: number; line: number; problem: string };

/**
 * Walk the chain. Detects an edited, inserted, deleted or reordered line (reported with its 1-based
 * line number). A cut-off tail cannot be told apart from a shorter log without an outside anchor:
 * compare `lastHash` with one you kept.
 */
export function verifyAuditText(text: string): AuditVerification {
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  let prev = GENESIS_HASH;
  for (let i = 0; i < lines.length; i++) {
    const fail = (problem: string): AuditVerification => ({ ok: false, records: i, line: i + 1, problem });
    const record = parseRecord(lines[i] as string);
    if (record === undefined) return fail('not a valid audit record (JSON with seq, prev, hash)');
    const { hash, ...body } = record;
    if (record.seq !== i)
      return fail(`seq is ${record.seq}, expected ${i} (a line was deleted, inserted or moved)`);
    if (record.prev !== prev)
      return fail('prev does not match the previous line (a line was deleted or moved)');
    if (hashRecord(body) !== hash) return fail('hash does not match the content (the line was edited)');
    prev = hash;
  }
  return { ok: true, records: lines.length, lastHash: prev };
}

export async function verifyAuditLog(file: string): Promise<AuditVerification> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      return { ok: true, records: 0, lastHash: GENESIS_HASH };
    throw err;
  }
  return verifyAuditText(text);
}
