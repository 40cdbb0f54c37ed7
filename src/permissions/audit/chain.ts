/**
 * Walking the hash chain of a log's bytes: every line a record, in order, each chained to the one before;
 * who wrote which run of records.
 */
import { ANCHOR_KEY, AUDIT_TOOL, GENESIS_HASH, RESTART_KEY, checkLine } from './record.js';

export type AuditProblemKind =
  /** A line that is not a canonical, correctly hashed record. */
  | 'malformed'
  /** seq or prev out of order: a line deleted, inserted or moved. */
  | 'chain'
  /** The last line has no newline: a crash during an append (or a cut in the middle of a line). */
  | 'torn'
  /** Fewer records than the head: the tail was cut, or the file emptied or deleted. */
  | 'truncated'
  /** Records after the head that name this state folder as their writer: it never wrote them. */
  | 'extra'
  /** Same length, different last hash, or the record the head names is not there: a rewrite. */
  | 'rewritten'
  /** A non-empty log with no head, or a head that cannot be read. */
  | 'unanchored'
  /** A head whose MAC does not verify with this user's key: not written by capsule for this project. */
  | 'forged'
  /** A head written by an earlier capsule, before heads were authenticated. */
  | 'unauthenticated'
  /** The chain was begun anew because the log its head named was missing or empty (deleted, emptied). */
  | 'restarted';

export type AuditVerification =
  | {
      ok: true;
      records: number;
      lastHash: string;
      /** True when the log was compared with its head; false: only the chain was checked. */
      anchored: boolean;
      /**
       * Records before this index were written before the log had a head (a log adopted by a later
       * append, which says so in its own record): the head vouches for them only from here on.
       */
      anchoredFrom: number;
      /** The writer id of the verifying state folder (absent without a head). */
      writer?: string | undefined;
      /** Runs of records written from other state folders: recorded, not tampering (see docs/permissions.md). */
      foreign: ForeignSegment[];
    }
  | { ok: false; records: number; line: number; kind: AuditProblemKind; problem: string };

/** A run of consecutive records written from one state folder (writer undefined: it named none). */
export interface WriterSegment {
  writer: string | undefined;
  /** seq of its first and last record. */
  from: number;
  to: number;
}

export interface Walk {
  records: number;
  lastHash: string;
  /** Hash after each requested record count (the records the head names). */
  hashAt: Map<number, string>;
  failure?: Extract<AuditVerification, { ok: false }> | undefined;
  /** Byte offset where a torn final fragment starts, and its length. */
  torn?: { offset: number; bytes: Buffer } | undefined;
  /** seq of the last note saying the log was adopted without a head (0: none). */
  anchoredFrom: number;
  /** The last note saying the chain began anew over a missing log (its seq and text). */
  restarted?: { seq: number; reason: string } | undefined;
  /** Who wrote what, in order (only the records walked). */
  writers: WriterSegment[];
}

interface WalkOptions {
  /** Record counts whose hash to keep (the head names them). */
  hashAt?: readonly number[] | undefined;
  /** The writer id of the state folder verifying: only its own notes say where its head begins. */
  mine?: string | undefined;
  /** Where `buf` starts in the chain: records before it and the hash of the last one. */
  start?: { records: number; lastHash: string; offset: number } | undefined;
}

export function walkChain(buf: Buffer, options: WalkOptions = {}): Walk {
  const hashAtCounts = options.hashAt ?? [];
  const base = options.start?.offset ?? 0;
  let prev = options.start?.lastHash ?? GENESIS_HASH;
  let records = options.start?.records ?? 0;
  const hashAt = new Map<number, string>();
  if (hashAtCounts.includes(records)) hashAt.set(records, prev);
  let start = 0;
  let anchoredFrom = 0;
  let restarted: Walk['restarted'];
  const writers: WriterSegment[] = [];
  while (start < buf.length) {
    const nl = buf.indexOf(0x0a, start);
    const fail = (kind: AuditProblemKind, problem: string): Walk => ({
      records,
      lastHash: prev,
      hashAt,
      anchoredFrom,
      restarted,
      writers,
      failure: { ok: false, records, line: records + 1, kind, problem },
    });
    if (nl < 0) {
      const bytes = buf.subarray(start);
      return {
        ...fail(
          'torn',
          `line ${records + 1} is a torn final line (${bytes.length} byte(s) with no newline): a crash during an append, or the log was cut inside a line`,
        ),
        torn: { offset: base + start, bytes },
      };
    }
    const line = buf.subarray(start, nl);
    const checked = checkLine(line);
    if (!checked.ok) return fail('malformed', `line ${records + 1} ${checked.problem}`);
    const r = checked.record;
    if (r.seq !== records)
      return fail('chain', `seq is ${r.seq}, expected ${records} (a line was deleted, inserted or moved)`);
    if (r.prev !== prev)
      return fail('chain', 'prev does not match the previous line (a line was deleted or moved)');
    const own = options.mine === undefined || r.writer === undefined || r.writer === options.mine;
    if (r.tool === AUDIT_TOOL && r.key === ANCHOR_KEY && own) anchoredFrom = r.seq;
    if (r.tool === AUDIT_TOOL && r.key === RESTART_KEY) restarted = { seq: r.seq, reason: r.reason };
    const run = writers.at(-1);
    if (run !== undefined && run.writer === r.writer) run.to = r.seq;
    else writers.push({ writer: r.writer, from: r.seq, to: r.seq });
    prev = r.hash;
    records++;
    if (hashAtCounts.includes(records)) hashAt.set(records, prev);
    start = nl + 1;
  }
  return { records, lastHash: prev, hashAt, anchoredFrom, restarted, writers };
}

/** The first record at or after `from` that names `mine` as its writer (undefined: none). */
export function ownAfter(
  writers: readonly WriterSegment[],
  from: number,
  mine: string | undefined,
): number | undefined {
  if (mine === undefined) return undefined;
  for (const w of writers) if (w.writer === mine && w.to >= from) return Math.max(w.from, from);
  return undefined;
}

/** Records written from state folders other than `mine`, and whether its head covers them. */
export interface ForeignSegment {
  /** The writer id the records name (null: they name none — an earlier capsule, or a log without a head). */
  writer: string | null;
  from: number;
  to: number;
  /**
   * True when they come after this folder's last record: its head does not cover them, so only the
   * folder that wrote them can tell whether they were cut or rewritten since.
   */
  afterHead: boolean;
}

export function foreignSegments(
  writers: readonly WriterSegment[],
  mine: string | undefined,
  headRecords: number,
): ForeignSegment[] {
  if (mine === undefined) return [];
  const out: ForeignSegment[] = [];
  for (const w of writers) {
    if (w.writer === mine) continue;
    // A run straddling the head's end is told as two: the part it covers and the part it does not.
    if (w.from < headRecords && w.to >= headRecords) {
      out.push({ writer: w.writer ?? null, from: w.from, to: headRecords - 1, afterHead: false });
      out.push({ writer: w.writer ?? null, from: headRecords, to: w.to, afterHead: true });
    } else out.push({ writer: w.writer ?? null, from: w.from, to: w.to, afterHead: w.from >= headRecords });
  }
  return out;
}
