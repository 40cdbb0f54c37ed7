import { createHash } from 'node:crypto';
import {
  closeSync,
  constants,
  fchownSync,
  fdatasync as fdatasyncCallback,
  fstatSync,
  ftruncateSync,
  openSync,
  statSync,
  writeSync,
} from 'node:fs';
import { mkdir, open, readFile, rename, truncate } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { withFileLock } from '../base/file-lock.js';
import { writeFileAtomic } from '../base/atomic-write.js';
import type { StateKey } from '../project/state-key.js';
import { parseStrictJson } from '../base/strict-json.js';
import { CapsuleError, type DeniedBy } from '../base/errors.js';
import type { Clock } from './session-allowlist.js';
import type { NetworkAuditFields } from './types.js';

const fdatasync = promisify(fdatasyncCallback);

export const GENESIS_HASH = '0'.repeat(64);

/** Append, create if missing, and never through a symlink planted where the log should be. */
const APPEND_FLAGS = constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW;

/** One decision, as the engine reports it. */
export interface AuditEvent {
  tool: string;
  key: string;
  /** `ask` and `none` (no decision, left to the host's own rules) are a judge's answers (tool `claude-hook`). */
  decision: 'allow' | 'deny' | 'error' | 'ask' | 'none';
  /** What decided: deny-rule, allow-rule, mode, project-allowlist, session-allowlist, prompt, no-prompt, … */
  source: string;
  /** Who denied (denials only): rule, mode, ceiling, person or nobody (see denial.ts). */
  deniedBy?: DeniedBy | undefined;
  reason: string;
  mode: string;
  /** The rule or allowlist key that decided. */
  matched?: string | undefined;
  /** The answer given at a prompt (Once, AlwaysThisSession, …). */
  answer?: string | undefined;
  contentHash?: string | undefined;
  sandboxed?: boolean | undefined;
  /** The run was asked for to learn what the capability needs (`capsule learn`): a run like any other. */
  learning?: boolean | undefined;
  /** A network request a capability made through capsule (tool `network`): where, how, how much. */
  network?: NetworkAuditFields | undefined;
}

const networkAuditSchema = z.strictObject({
  capability: z.string(),
  host: z.string(),
  port: z.int(),
  method: z.string(),
  address: z.string().optional(),
  bytesOut: z.int().min(0),
  bytesIn: z.int().min(0),
});

const HEX64 = /^[0-9a-f]{64}$/;
const WRITER_ID = /^[0-9a-f]{16}$/;

/** A write interrupted by a kill stops at a page boundary of the file. */
const PAGE_BYTES = 4096;

const auditRecordSchema = z
  .strictObject({
    seq: z.int().min(0),
    time: z.string(),
    tool: z.string(),
    key: z.string(),
    decision: z.enum(['allow', 'deny', 'error', 'ask', 'none']),
    source: z.string(),
    denied_by: z
      .enum(['rule', 'mode', 'ceiling', 'person', 'nobody'])
      .optional()
      .describe('Who denied (denials only). Absent in lines written before it was recorded.'),
    reason: z.string(),
    mode: z.string(),
    matched: z.string().optional(),
    answer: z.string().optional(),
    contentHash: z.string().optional(),
    sandboxed: z.boolean().optional(),
    learning: z
      .literal(true)
      .optional()
      .describe('Present on the decisions of a learning run (`capsule learn`); absent otherwise.'),
    network: networkAuditSchema.optional(),
    writer: z
      .string()
      .regex(WRITER_ID)
      .optional()
      .describe(
        'Which state folder wrote the record (writerId of its key). Absent in lines written before several writers shared a log, and in logs kept without a head.',
      ),
    prev: z.string().regex(HEX64),
    hash: z.string().regex(HEX64),
  })
  .describe('One line of .capsule/audit.jsonl, in exactly this key order.');

/** A line of the log: the event plus its place in the chain. */
export type AuditRecord = z.infer<typeof auditRecordSchema>;
type AuditBody = Omit<AuditRecord, 'hash'>;

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

const HEAD_MAC_PURPOSE = 'audit-head';

/**
 * The name a state folder writes into each of its records: derived from its key, so two folders (two
 * users, sudo, a container, another XDG_STATE_HOME) never share one, and it tells nothing of the key.
 */
export async function writerId(key: StateKey): Promise<string> {
  const mac = await key.sign('audit-writer', 'writer', {});
  const hex = mac.slice(mac.indexOf(':') + 1);
  return hex.slice(0, 16);
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

/** The one serialization capsule writes; verification rebuilds it and compares bytes. */
function canonicalBody(r: AuditBody): string {
  return JSON.stringify({
    seq: r.seq,
    time: r.time,
    tool: r.tool,
    key: r.key,
    decision: r.decision,
    source: r.source,
    ...(r.denied_by !== undefined ? { denied_by: r.denied_by } : {}),
    reason: r.reason,
    mode: r.mode,
    ...(r.matched !== undefined ? { matched: r.matched } : {}),
    ...(r.answer !== undefined ? { answer: r.answer } : {}),
    ...(r.contentHash !== undefined ? { contentHash: r.contentHash } : {}),
    ...(r.sandboxed !== undefined ? { sandboxed: r.sandboxed } : {}),
    ...(r.learning === true ? { learning: true } : {}),
    ...(r.network !== undefined ? { network: canonicalNetwork(r.network) } : {}),
    ...(r.writer !== undefined ? { writer: r.writer } : {}),
    prev: r.prev,
  });
}

/** Exactly the fields a network record logs, in their order (a record's hash covers them). */
export function canonicalNetwork(n: NetworkAuditFields): NetworkAuditFields {
  return {
    capability: n.capability,
    host: n.host,
    port: n.port,
    method: n.method,
    ...(n.address !== undefined ? { address: n.address } : {}),
    bytesOut: n.bytesOut,
    bytesIn: n.bytesIn,
  };
}

function sha256(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** The line for a body: `{…body…,"hash":"<sha256 of the body's bytes>"}` (no newline). */
function lineFor(body: AuditBody): { line: string; hash: string } {
  const text = canonicalBody(body);
  const hash = sha256(text);
  return { line: `${text.slice(0, -1)},"hash":"${hash}"}`, hash };
}

// fatal: invalid UTF-8 is an error, not U+FFFD; ignoreBOM: a leading BOM stays in the text (and so
// fails the canonical check) instead of being dropped silently. Decoding is then one-to-one, so a
// line equal to the canonical text is equal to it byte for byte.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

type LineCheck = { ok: true; record: AuditRecord } | { ok: false; problem: string };

/**
 * One line, judged on its exact bytes: valid UTF-8, strict JSON (no key twice), every field known
 * and typed, byte-for-byte the canonical serialization, and its hash the sha256 of those bytes
 * (minus the hash field itself). Anything a reader could see differently from the hash is refused.
 */
function checkLine(bytes: Uint8Array): LineCheck {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return { ok: false, problem: 'is not valid UTF-8' };
  }
  const json = parseStrictJson(text);
  if (!json.ok) {
    return {
      ok: false,
      problem:
        json.kind === 'duplicate-key'
          ? `repeats the key ${json.field ?? ''} (a reader and the hash would see different values)`
          : 'is not JSON (a torn or edited line)',
    };
  }
  const parsed = auditRecordSchema.safeParse(json.value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = issue?.path.join('.') || (issue?.code === 'unrecognized_keys' ? issue.keys.join(', ') : '');
    return {
      ok: false,
      problem: `is not an audit record (${field || 'top level'}: ${issue?.message ?? ''})`,
    };
  }
  const { hash, ...body } = parsed.data;
  const canonical = canonicalBody(body);
  if (`${canonical.slice(0, -1)},"hash":"${hash}"}` !== text) {
    return {
      ok: false,
      problem: 'is not in canonical form (spacing, key order or escapes differ from what capsule writes)',
    };
  }
  // The text is now known to be `canonical` plus the hash field: this hashes the line's own bytes.
  if (sha256(canonical) !== hash)
    return { ok: false, problem: 'hash does not match the bytes of the line (the line was edited)' };
  return { ok: true, record: parsed.data };
}

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

export interface VerifyOptions {
  /** The log's head; without it only the chain itself is checked. */
  head?: AuditHeadRef | undefined;
}

/** A run of consecutive records written from one state folder (writer undefined: it named none). */
export interface WriterSegment {
  writer: string | undefined;
  /** seq of its first and last record. */
  from: number;
  to: number;
}

interface Walk {
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

function walkChain(buf: Buffer, options: WalkOptions = {}): Walk {
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
function ownAfter(
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

function foreignSegments(
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

function ownAfterHeadProblem(own: number, head: AuditHead, said: string): string {
  return `record ${own} names this state folder as its writer, yet ${said}: this folder never wrote it (it was forged), or the head was put back from an older copy`;
}

/** Compare a walked chain (of a log of `size` bytes) with the head of the state folder `mine`. */
function againstHead(
  walk: Walk,
  head: AuditHead,
  headFile: string,
  size: number,
  mine: string | undefined,
): AuditVerification {
  const { records, lastHash } = walk;
  const batch = head.pending;
  if (batch !== undefined && walk.failure === undefined) {
    // The announced batch is in the log whole (other writers may have added records after it): the
    // kill came before the head could say so.
    if (records >= batch.records && walk.hashAt.get(batch.records) === batch.lastHash) {
      const { pending: _landed, ...rest } = head;
      return againstHead(
        walk,
        { ...rest, records: batch.records, lastHash: batch.lastHash, size: batch.to },
        headFile,
        size,
        mine,
      );
    }
    // Part of it, cut at a page boundary by a kill (a write interrupted between pages stops there).
    if (
      records > head.records &&
      records < batch.records &&
      size > batch.from &&
      size < batch.to &&
      size % PAGE_BYTES === 0 &&
      walk.hashAt.get(head.records) === head.lastHash
    ) {
      return {
        ok: false,
        records,
        line: records + 1,
        kind: 'torn',
        problem: `a batch of ${batch.records - head.records} record(s) was cut short after ${records - head.records} by a crash during its write (none of its decisions had been returned); the records before it match the head`,
      };
    }
  }
  const said = `this state folder's head (${headFile}) says the log held ${head.records} record(s) after its last write`;
  if (walk.failure !== undefined && walk.failure.kind !== 'torn') return walk.failure;
  if (walk.torn !== undefined) {
    // A torn fragment after exactly the records the head names is what a crash leaves.
    const failure = walk.failure as Extract<AuditVerification, { ok: false }>;
    const matches =
      records >= head.records &&
      walk.hashAt.get(head.records) === head.lastHash &&
      ownAfter(walk.writers, head.records, mine) === undefined;
    return {
      ...failure,
      problem: `${failure.problem}; ${matches ? 'the records before it match the head' : `and ${said} while ${records} precede it`}`,
    };
  }
  if (records < head.records) {
    return {
      ok: false,
      records,
      line: records + 1,
      kind: 'truncated',
      problem: `the log has ${records} record(s) but ${said}: records were cut from its end, or it was emptied, deleted or replaced`,
    };
  }
  if (walk.hashAt.get(head.records) !== head.lastHash) {
    return {
      ok: false,
      records,
      line: head.records,
      kind: 'rewritten',
      problem: `record ${head.records - 1} is not the one this state folder wrote there (its hash is not ${head.lastHash}, which its head holds): the log was rewritten`,
    };
  }
  const own = ownAfter(walk.writers, head.records, mine);
  if (own !== undefined || (mine === undefined && records > head.records)) {
    return {
      ok: false,
      records,
      line: (own ?? head.records) + 1,
      kind: 'extra',
      problem:
        own !== undefined
          ? ownAfterHeadProblem(own, head, said)
          : `${records - head.records} record(s) after the last one its head names: appended by something other than capsule, or a crash between an append and the head update`,
    };
  }
  if (walk.restarted !== undefined) {
    // Detected, and kept visible: the note is chained under the head, so it cannot be taken out.
    return {
      ok: false,
      records,
      line: walk.restarted.seq + 1,
      kind: 'restarted',
      problem: `record ${walk.restarted.seq} says: ${walk.restarted.reason} (capsule audit reset acknowledges it and starts a clean chain)`,
    };
  }
  return {
    ok: true,
    records,
    lastHash,
    anchored: true,
    anchoredFrom: walk.anchoredFrom,
    writer: mine,
    foreign: foreignSegments(walk.writers, mine, head.records),
  };
}

type HeadRead =
  | { found: true; head: AuditHead }
  | { found: false }
  | { found: false; broken: string; kind: AuditProblemKind };

/** A head is one only when capsule wrote it with this user's key for this file (never a copy). */
async function readHead(ref: AuditHeadRef): Promise<HeadRead> {
  let text: string;
  try {
    text = await readFile(ref.file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { found: false };
    return {
      found: false,
      kind: 'unanchored',
      broken: `cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
    };
  }
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

async function readLog(file: string): Promise<Buffer | undefined> {
  try {
    return await readFile(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * Walk the chain and, given the head, compare its length and last hash with it. Detects an edited,
 * inserted, deleted or reordered line, a non-canonical line, a torn final line, and (with the head) a
 * cut tail, an emptied, deleted or wholly rewritten log. See docs/permissions.md for what it cannot see.
 */
export async function verifyAuditLog(file: string, options: VerifyOptions = {}): Promise<AuditVerification> {
  const buf = (await readLog(file)) ?? Buffer.alloc(0);
  const headFile = options.head?.file;
  let head: AuditHead | undefined;
  if (options.head !== undefined) {
    const read = await readHead(options.head);
    if ('broken' in read) {
      return {
        ok: false,
        records: 0,
        line: 0,
        kind: read.kind,
        problem: `the head ${options.head.file} ${read.broken}`,
      };
    }
    if (read.found) head = read.head;
  }
  const mine = options.head !== undefined ? await writerId(options.head.key) : undefined;
  const counts = head === undefined ? [] : [head.records, ...(head.pending ? [head.pending.records] : [])];
  const walk = walkChain(buf, { hashAt: counts, mine });
  if (head !== undefined && headFile !== undefined)
    return againstHead(walk, head, headFile, buf.length, mine);
  if (walk.failure !== undefined) return walk.failure;
  if (headFile !== undefined && walk.records > 0) {
    return {
      ok: false,
      records: walk.records,
      line: 0,
      kind: 'unanchored',
      problem: `the chain of ${walk.records} record(s) is consistent, but this state folder has no head for it (${headFile}; it never wrote to this log, or its head was deleted): a cut, deleted or rewritten log cannot be told from it here — verify from a state folder that wrote to it`,
    };
  }
  return {
    ok: true,
    records: walk.records,
    lastHash: walk.lastHash,
    anchored: headFile !== undefined,
    anchoredFrom: walk.anchoredFrom,
    writer: mine,
    foreign: [],
  };
}

/** Pure: the chain checks on a log's text (no head). */
export function verifyAuditText(text: string): AuditVerification {
  const walk = walkChain(Buffer.from(text, 'utf8'));
  return (
    walk.failure ?? {
      ok: true,
      records: walk.records,
      lastHash: walk.lastHash,
      anchored: false,
      anchoredFrom: walk.anchoredFrom,
      foreign: [],
    }
  );
}

export interface JsonlAuditLogOptions {
  /** The head and its key. Without one the log is only self-consistent: a cut tail goes unseen. */
  head?: AuditHeadRef | undefined;
  /** The project, as written into the head for people. */
  projectRoot?: string | undefined;
}

/** At most this many records in one write (a burst larger than this is written in several batches). */
const MAX_BATCH = 2048;

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
    try {
      await this.appendBatch(batch.map((w) => w.event));
    } catch (err) {
      const failure = this.failure(err);
      for (const w of batch) w.reject(failure);
      return;
    }
    for (const w of batch) w.resolve();
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

  private lock<T>(fn: () => Promise<T>): Promise<T> {
    return withFileLock(`${this.file}.lock`, fn);
  }

  private async appendBatch(events: readonly AuditEvent[]): Promise<void> {
    // The lock below creates the folder too; this is only for a log this instance has not written yet.
    if (this.tail === undefined) await makeLogDir(path.dirname(this.file));
    await this.lock(async () => {
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
      this.tail = { size: last.size + bytes.length, seq, hash: prev };
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
          if (
            before.problem === undefined &&
            before.torn === undefined &&
            before.records === head.records &&
            before.lastHash === head.lastHash
          ) {
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
      if (
        at.problem === undefined &&
        at.torn === undefined &&
        at.records === head.records &&
        at.lastHash === head.lastHash
      )
        from = head.size;
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
      if ((await readLog(this.file)) !== undefined) {
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

/**
 * Append `bytes` with one write (looping only on a short write) and fsync before returning: what
 * append() promises to its caller is on disk, not only in the page cache.
 */
async function appendDurably(file: string, bytes: Buffer): Promise<void> {
  // The write into the page cache is synchronous (microseconds); the fsync, which waits for the
  // disk, goes through the thread pool so the process keeps serving (and queueing) meanwhile.
  const fd = openSync(file, APPEND_FLAGS, 0o600);
  try {
    if (process.geteuid?.() === 0) ownLikeFolder(fd, path.dirname(file));
    let done = 0;
    while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
    await fdatasync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Root writing into someone else's project (sudo, a container running as root): what it creates
 * there takes the owner of the folder it is in, so that person's own later calls can still append
 * to the log they share. Only root can, and only what root owns and is reachable by this one name
 * (one link, never through a symlink: the fd was opened O_NOFOLLOW) is given away — never a file
 * linked in from elsewhere.
 */
function ownLikeFolder(fd: number, folder: string): void {
  const st = fstatSync(fd);
  const dir = statSync(folder);
  if (st.uid === 0 && dir.uid !== 0 && st.nlink === 1 && st.isFile()) fchownSync(fd, dir.uid, dir.gid);
}

/** The log's folder (`.capsule`), given the owner of the project when root made it. */
async function makeLogDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  if (process.geteuid?.() !== 0) return;
  let fd: number;
  try {
    fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch {
    return; // not a plain folder (a symlink planted there): the append that follows says so
  }
  try {
    const st = fstatSync(fd);
    // A folder's link count is 2 + its subfolders: judge it as a folder, not by links.
    const parent = statSync(path.dirname(dir));
    if (st.uid === 0 && parent.uid !== 0) fchownSync(fd, parent.uid, parent.gid);
  } finally {
    closeSync(fd);
  }
}

async function readRange(file: string, start: number, length: number): Promise<Buffer> {
  const handle = await open(file, 'r');
  try {
    const buf = Buffer.alloc(length);
    const { bytesRead } = await handle.read(buf, 0, length, start);
    return buf.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** The log's own records: a log adopted without a head, a torn line removed, a new chain. */
const AUDIT_TOOL = 'audit';
const ANCHOR_KEY = 'audit:anchor';
const RESTART_KEY = 'audit:restart';

function uidText(): string {
  const uid = process.getuid?.();
  return uid !== undefined ? ` (uid ${uid})` : '';
}

function auditNote(reason: string, key = 'audit:log'): AuditEvent {
  return { tool: AUDIT_TOOL, key, decision: 'allow', source: 'audit', reason, mode: '-' };
}

interface Tail {
  /** seq + 1 of the last complete line (0 for an empty log), and its hash. */
  records: number;
  lastHash: string;
  /** Bytes after the last newline: a torn final line. */
  torn?: { offset: number; bytes: Buffer } | undefined;
  /** The last complete line is not a valid record. */
  problem?: string | undefined;
  /** The writer its last complete record names. */
  writer?: string | undefined;
}

/** The last complete line of the log and any fragment after it, read from the end of the file. */
async function readTail(file: string, size: number): Promise<Tail> {
  if (size === 0) return { records: 0, lastHash: GENESIS_HASH };
  const handle = await open(file, 'r');
  try {
    for (let chunk = 8192; ; chunk *= 4) {
      const start = Math.max(0, size - chunk);
      const buf = Buffer.alloc(size - start);
      const { bytesRead } = await handle.read(buf, 0, buf.length, start);
      if (bytesRead !== buf.length)
        return { records: 0, lastHash: GENESIS_HASH, problem: 'it changed while it was being read' };
      const lastNl = buf.lastIndexOf(0x0a);
      const torn =
        lastNl === buf.length - 1
          ? undefined
          : { offset: start + lastNl + 1, bytes: Buffer.from(buf.subarray(lastNl + 1)) };
      if (lastNl < 0 && start > 0) continue; // no newline in this chunk yet: read more
      if (lastNl < 0) return { records: 0, lastHash: GENESIS_HASH, torn };
      const prevNl = lastNl > 0 ? buf.lastIndexOf(0x0a, lastNl - 1) : -1;
      if (prevNl < 0 && start > 0) continue; // the line may begin further back
      const lineStart = prevNl + 1;
      const checked = checkLine(buf.subarray(lineStart, lastNl));
      if (!checked.ok)
        return { records: 0, lastHash: GENESIS_HASH, torn, problem: `its last line ${checked.problem}` };
      return {
        records: checked.record.seq + 1,
        lastHash: checked.record.hash,
        torn,
        writer: checked.record.writer,
      };
    }
  } finally {
    await handle.close();
  }
}

function fileSize(file: string): number {
  try {
    return statSync(file).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw err;
  }
}

/** A head is one page, padded with spaces (valid JSON whitespace), so it can be overwritten in place. */
const HEAD_BYTES = 4096;

/**
 * Overwrite the head in place with one page-sized write at offset 0: a killed process leaves the old
 * page or the new one (a single write into the page cache is not interrupted halfway), and it costs a
 * fraction of a create-and-rename per append. A first head, or one too long for a page, is written
 * beside and renamed over.
 */
async function writeHeadFile(file: string, text: string, checkSize: boolean): Promise<void> {
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
