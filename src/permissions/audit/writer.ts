/**
 * The JSONL writer: group commit under a lock across processes, a checked tail before every append, and
 * the head updated around each batch.
 */
import { mkdir, rename, truncate } from 'node:fs/promises';
import path from 'node:path';
import { withFileLock, type LockHold } from '../../base/file-lock.js';
import { CapsuleError } from '../../base/errors.js';
import type { Clock } from '../session-allowlist.js';
import {
  HEAD_MAC_PURPOSE,
  readHead,
  type AuditHead,
  type AuditHeadRef,
  type HeadRead,
  writeHeadFile,
  writerId,
} from './head.js';
import {
  ANCHOR_KEY,
  GENESIS_HASH,
  RESTART_KEY,
  auditNote,
  lineFor,
  type AuditBody,
  type AuditEvent,
  type AuditSink,
} from './record.js';
import { appendDurably, fileSize, makeLogDir, readRange, readTail, uidText } from './log-file.js';
import { ownAfter, walkChain } from './chain.js';
import { ownAfterHeadProblem, verifyAuditLog } from './verify.js';
import { readOptionalFile } from '../../base/optional-file.js';

export interface JsonlAuditLogOptions {
  /** The head and its key. Without one the log is only self-consistent: a cut tail goes unseen. */
  head?: AuditHeadRef | undefined;
  /** The project, as written into the head for people. */
  projectRoot?: string | undefined;
}

/** At most this many records in one write (a burst larger than this is written in several batches). */
const MAX_BATCH = 2048;

/** Whether the log read up to an offset ends there, whole and valid, at the record the head names. */
function endsAtHead(read: Awaited<ReturnType<typeof readTail>>, head: AuditHead): boolean {
  return (
    read.problem === undefined &&
    read.torn === undefined &&
    read.records === head.records &&
    read.lastHash === head.lastHash
  );
}

interface Waiting {
  event: AuditEvent;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * Append-only JSONL log, each line hash-chained to the previous one: hash = sha256 of the line's own
 * bytes without its `hash` field, and those bytes hold `prev` (the previous hash) and `seq` (its
 * index). The head (record count and last hash) is kept in a file outside the project, so a cut,
 * emptied or rewritten log no longer matches it.
 *
 * Group commit: appends made while a write is in flight wait and are written together by the next
 * one — under one lock (across processes), one write, one fsync and one head update. append()
 * resolves only once its record is on disk, so a caller that acts after it never acts on a decision
 * the log could lose: write before acting.
 */
export class JsonlAuditLog implements AuditSink {
  /** Batches and resets, one at a time in this process (the lock file orders processes). */
  private chain: Promise<unknown> = Promise.resolve();
  private waiting: Waiting[] = [];
  private flushQueued = false;
  /** What we last wrote: trusted only while the log's size is what we left it at. */
  private tail: { size: number; seq: number; hash: string } | undefined;
  private headDirReady = false;
  /** The head file is known to be exactly one page (checked on this instance's first write). */
  private headSized = false;
  private writer: Promise<string | undefined> | undefined;

  constructor(
    readonly file: string,
    private readonly clock: Clock,
    private readonly options: JsonlAuditLogOptions = {},
  ) {}

  /**
   * Resolves once the record is durable (written and fsynced). Fails closed: a decision that cannot
   * be recorded is an error (AUDIT_BROKEN), not a silent gap.
   */
  append(event: AuditEvent): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiting.push({ event, resolve, reject });
      this.queueFlush();
    });
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn);
    this.chain = run.catch(() => undefined);
    return run;
  }

  private queueFlush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    void this.exclusive(() => this.flush());
  }

  /** Write everything that is waiting now; what arrives meanwhile waits for the next flush. */
  private async flush(): Promise<void> {
    this.flushQueued = false;
    const batch = this.waiting.splice(0, MAX_BATCH);
    if (this.waiting.length > 0) this.queueFlush();
    if (batch.length === 0) return;
    // Answered as soon as the batch is durable and the lock proved still held: the callers act
    // while the lock is let go. (A promise answered twice keeps its first answer.)
    const answer = () => {
      for (const w of batch) w.resolve();
    };
    try {
      await this.appendBatch(
        batch.map((w) => w.event),
        answer,
      );
    } catch (err) {
      const failure = this.failure(err);
      for (const w of batch) w.reject(failure);
      return;
    }
    answer();
  }

  private failure(err: unknown): CapsuleError {
    if (err instanceof CapsuleError) return err;
    const code = (err as NodeJS.ErrnoException).code ?? (err instanceof Error ? err.message : 'error');
    return new CapsuleError(
      'AUDIT_BROKEN',
      `Cannot append to the audit log ${this.file} (${code}).`,
      {
        file: this.file,
        hint: 'capsule records every permission decision there: make the .capsule folder writable.',
      },
      { cause: err },
    );
  }

  private lock<T>(fn: (lock: LockHold) => Promise<T>): Promise<T> {
    return withFileLock(`${this.file}.lock`, fn);
  }

  /** `durable`: called once the batch is on disk, the head says so and the lock is still ours. */
  private async appendBatch(events: readonly AuditEvent[], durable: () => void): Promise<void> {
    // The lock below creates the folder too; this is only for a log this instance has not written yet.
    if (this.tail === undefined) await makeLogDir(path.dirname(this.file));
    await this.lock(async (held) => {
      const size = fileSize(this.file);
      const notes: AuditEvent[] = [];
      let last = this.tail !== undefined && this.tail.size === size ? this.tail : undefined;
      if (last === undefined) last = await this.establishTail(size, notes);
      const writer = await this.writerName();
      let seq = last.seq;
      let prev = last.hash;
      let out = '';
      for (const e of [...notes, ...events]) {
        seq++;
        const { line, hash } = lineFor(this.body(e, seq, prev, writer));
        out += `${line}\n`;
        prev = hash;
      }
      const bytes = Buffer.from(out, 'utf8');
      // Announce the batch, write it, then say it is there: a kill at any point leaves a log that
      // verifies (before, or after, the batch) or ends in a torn batch the next append removes.
      await this.writeHead(last.seq + 1, last.hash, last.size, {
        from: last.size,
        to: last.size + bytes.length,
        records: seq + 1,
        lastHash: prev,
      });
      await appendDurably(this.file, bytes);
      await this.writeHead(seq + 1, prev, last.size + bytes.length);
      held.confirm();
      this.tail = { size: last.size + bytes.length, seq, hash: prev };
      durable();
    });
  }

  private body(e: AuditEvent, seq: number, prev: string, writer: string | undefined): AuditBody {
    return {
      seq,
      time: new Date(this.clock.now()).toISOString(),
      tool: e.tool,
      key: e.key,
      decision: e.decision,
      source: e.source,
      denied_by: e.deniedBy,
      reason: e.reason,
      mode: e.mode,
      matched: e.matched,
      answer: e.answer,
      contentHash: e.contentHash,
      sandboxed: e.sandboxed,
      learning: e.learning === true ? true : undefined,
      network: e.network,
      writer,
      prev,
    };
  }

  /**
   * The log's tail, checked against this state folder's head before anything is chained onto it.
   * Records other state folders appended after this folder's last one are theirs to vouch for: they
   * are chained onto, and `verify` names them. A torn final fragment (a crashed append) is cut off and
   * the cut is recorded. Anything else that does not match is AUDIT_BROKEN: a broken chain is never
   * extended.
   */
  private async establishTail(
    size: number,
    notes: AuditEvent[],
  ): Promise<{ size: number; seq: number; hash: string }> {
    const ref = this.options.head;
    const headFile = ref?.file;
    const mine = await this.writerName();
    const read = ref !== undefined ? await readHead(ref) : ({ found: false } as HeadRead);
    if ('broken' in read) throw this.broken(`this state folder's head ${headFile ?? ''} ${read.broken}`);
    let head = read.found ? read.head : undefined;
    // Only the end of the log is read: its last record must be the one the head names, or follow it.
    // Whatever is wrong further up is for `verify` to find; it is never hidden by extending the chain.
    const tail = await readTail(this.file, size);
    const batch = head?.pending;
    if (head !== undefined && batch !== undefined) {
      const atTo =
        batch.to === size ? tail : batch.to < size ? await readTail(this.file, batch.to) : undefined;
      if (
        atTo?.problem === undefined &&
        atTo?.torn === undefined &&
        atTo?.records === batch.records &&
        atTo.lastHash === batch.lastHash
      ) {
        // A writer was killed after writing its batch whole: the head written next says it is there.
        const { pending: _landed, ...rest } = head;
        head = { ...rest, records: batch.records, lastHash: batch.lastHash, size: batch.to };
      } else {
        const atHead = tail.records === head.records && tail.lastHash === head.lastHash;
        if (
          !atHead &&
          size > batch.from &&
          size < batch.to &&
          !(await this.othersChained(head, batch.from, size, mine))
        ) {
          // Killed during the write: part of the batch reached the file. None of its decisions was
          // returned (append resolves after the write), so it is cut back to where it began — if the
          // record there is the one the head names — and the cut is recorded with what it removed.
          const before = await readTail(this.file, batch.from);
          if (endsAtHead(before, head)) {
            const cut = await readRange(this.file, batch.from, Math.min(size - batch.from, 200));
            await truncate(this.file, batch.from);
            notes.push(
              auditNote(
                `a batch of ${batch.records - head.records} record(s) cut short by a crash during its write was removed from the log (${size - batch.from} of its ${batch.to - batch.from} byte(s) had been written; none of its decisions had been returned): ${JSON.stringify(cut.toString('utf8'))}${size - batch.from > 200 ? ' …' : ''}`,
              ),
            );
            return { size: batch.from, seq: head.records - 1, hash: head.lastHash };
          }
        }
      }
    }
    if (tail.problem !== undefined) throw this.broken(tail.problem);
    if (head === undefined) {
      if (tail.torn !== undefined) throw this.broken('its last line is torn (no newline) and it has no head');
      if (headFile !== undefined && tail.records > 0) {
        notes.push(
          auditNote(
            `records written from the state folder ${path.dirname(path.dirname(headFile))}${uidText()} begin here${mine !== undefined ? `, as writer ${mine}` : ''}; that folder had no head for this log, so the ${tail.records} record(s) before this one are anchored by it from here on, not before`,
            ANCHOR_KEY,
          ),
        );
      }
      return { size, seq: tail.records - 1, hash: tail.lastHash };
    }
    if (tail.records === 0 && tail.torn === undefined && head.records > 0) {
      // The whole log is gone (deleted, emptied, or a fresh checkout at the same path): decisions go on
      // being recorded, in a new chain whose first record says what the head remembered, so `verify`
      // reports the loss for good instead of every later call failing.
      notes.push(
        auditNote(
          `the log was missing or empty while its head named ${head.records} record(s), last hash ${head.lastHash}: it was deleted or emptied; a new chain begins here`,
          RESTART_KEY,
        ),
      );
      return { size, seq: -1, hash: tail.lastHash };
    }
    // A head that knows the log's size must find it so: a line repeated at the end is not the head's.
    const sized = head.size === undefined || (tail.torn?.offset ?? size) === head.size;
    if (tail.records === head.records && tail.lastHash === head.lastHash && sized) {
      if (tail.torn === undefined) return { size, seq: tail.records - 1, hash: tail.lastHash };
      return this.cutTorn(tail.torn, tail.records, tail.lastHash, notes);
    }
    return this.afterOthers(head, size, mine, notes);
  }

  /**
   * The head names a record that is not the last: read on from it. Records other folders wrote are
   * chained onto; a record naming this folder that its head does not cover, or any break, is not.
   */
  private async afterOthers(
    head: AuditHead,
    size: number,
    mine: string | undefined,
    notes: AuditEvent[],
  ): Promise<{ size: number; seq: number; hash: string }> {
    const ref = this.options.head;
    let from: number | undefined;
    if (head.size !== undefined && head.size <= size) {
      const at = await readTail(this.file, head.size);
      if (endsAtHead(at, head)) from = head.size;
    }
    if (from !== undefined) {
      const walk = walkChain(await readRange(this.file, from, size - from), {
        mine,
        start: { records: head.records, lastHash: head.lastHash, offset: from },
      });
      if (walk.failure === undefined || walk.failure.kind === 'torn') {
        const own = ownAfter(walk.writers, head.records, mine);
        if (own !== undefined)
          throw this.broken(
            ownAfterHeadProblem(
              own,
              head,
              `this state folder's head (${ref?.file ?? ''}) ends at record ${head.records - 1}`,
            ),
          );
        if (walk.torn !== undefined) return this.cutTorn(walk.torn, walk.records, walk.lastHash, notes);
        return { size, seq: walk.records - 1, hash: walk.lastHash };
      }
    }
    // A head of an earlier capsule (no size), or the log does not hold what it names: read it all,
    // once, to judge it (and say precisely how it is broken).
    const verdict = await verifyAuditLog(this.file, { head: ref });
    if (verdict.ok) return { size, seq: verdict.records - 1, hash: verdict.lastHash };
    throw this.broken(verdict.problem);
  }

  /**
   * Whether records another state folder wrote follow the record the head names, chained onto it:
   * then what lies between is not a batch of this folder's to cut back, whatever its length.
   */
  private async othersChained(
    head: AuditHead,
    from: number,
    size: number,
    mine: string | undefined,
  ): Promise<boolean> {
    const walk = walkChain(await readRange(this.file, from, size - from), {
      mine,
      start: { records: head.records, lastHash: head.lastHash, offset: from },
    });
    const clean = walk.failure === undefined || walk.failure.kind === 'torn';
    return clean && walk.writers.some((w) => w.writer !== mine);
  }

  /** The records before a torn fragment are intact: the fragment (a crashed append) is cut and said. */
  private async cutTorn(
    torn: { offset: number; bytes: Buffer },
    records: number,
    lastHash: string,
    notes: AuditEvent[],
  ): Promise<{ size: number; seq: number; hash: string }> {
    const { offset, bytes } = torn;
    await truncate(this.file, offset);
    const shown = JSON.stringify(bytes.subarray(0, 200).toString('utf8'));
    notes.push(
      auditNote(
        `a torn final line of ${bytes.length} byte(s) (a crash during an append) was removed from the log: ${shown}${bytes.length > 200 ? ' …' : ''}`,
      ),
    );
    return { size: offset, seq: records - 1, hash: lastHash };
  }

  /** This state folder's writer id (none without a head: such a log names no writer). */
  private writerName(): Promise<string | undefined> {
    const ref = this.options.head;
    this.writer ??= ref !== undefined ? writerId(ref.key) : Promise.resolve(undefined);
    return this.writer;
  }

  private broken(problem: string): CapsuleError {
    return new CapsuleError(
      'AUDIT_BROKEN',
      `capsule cannot vouch for the audit log ${this.file}, so it records (and runs) nothing more on it: ${problem}.`,
      {
        file: this.file,
        hint:
          'A person chooses how to go on: look with `capsule audit verify`, keep a copy of the log, then ' +
          '`capsule audit reset` moves it aside (never deleted) and starts a new chain that records that choice.',
      },
    );
  }

  private async writeHead(
    records: number,
    lastHash: string,
    size: number,
    pending?: AuditHead['pending'],
  ): Promise<void> {
    const ref = this.options.head;
    if (ref === undefined) return;
    const headFile = ref.file;
    if (!this.headDirReady) {
      await mkdir(path.dirname(headFile), { recursive: true, mode: 0o700 });
      this.headDirReady = true;
    }
    const head: AuditHead = {
      schemaVersion: 2,
      projectRoot: this.options.projectRoot ?? path.dirname(path.dirname(this.file)),
      log: this.file,
      records,
      lastHash,
      size,
      updated: new Date(this.clock.now()).toISOString(),
      ...(pending !== undefined ? { pending } : {}),
    };
    const mac = await ref.key.sign(HEAD_MAC_PURPOSE, path.basename(headFile), head);
    await writeHeadFile(headFile, JSON.stringify({ ...head, mac }), !this.headSized);
    this.headSized = true;
  }

  /**
   * A person's fresh start (`capsule audit reset`): the current log, if any, is moved aside (never
   * deleted), and a new chain begins with a record saying so and what the old one looked like.
   */
  reset(reason: string): Promise<{ movedTo?: string | undefined }> {
    return this.exclusive(() => this.resetNow(reason));
  }

  private async resetNow(reason: string): Promise<{ movedTo?: string | undefined }> {
    await makeLogDir(path.dirname(this.file));
    let movedTo: string | undefined;
    await this.lock(async () => {
      const stamp = new Date(this.clock.now()).toISOString().replace(/[:.]/g, '-');
      if ((await readOptionalFile(this.file)) !== undefined) {
        movedTo = path.join(path.dirname(this.file), `audit.${stamp}.jsonl`);
        await rename(this.file, movedTo);
      }
      const ref = this.options.head;
      const before = ref !== undefined ? await readHead(ref) : undefined;
      const was =
        before?.found === true
          ? `its head said ${before.head.records} record(s), last hash ${before.head.lastHash}`
          : before !== undefined && 'broken' in before
            ? `its head ${before.broken}`
            : 'it had no head';
      const { line, hash } = lineFor(
        this.body(
          auditNote(
            `a new chain was started by a person (${reason}); ${movedTo !== undefined ? `the previous log was moved to ${movedTo}` : 'there was no previous log'}; ${was}`,
          ),
          0,
          GENESIS_HASH,
          await this.writerName(),
        ),
      );
      const out = Buffer.from(`${line}\n`, 'utf8');
      await this.writeHead(0, GENESIS_HASH, 0, { from: 0, to: out.length, records: 1, lastHash: hash });
      await appendDurably(this.file, out);
      await this.writeHead(1, hash, out.length);
      this.tail = { size: out.length, seq: 0, hash };
    });
    return { movedTo };
  }
}
