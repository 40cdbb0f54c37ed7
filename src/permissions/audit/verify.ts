/**
 * Verifying a log: its chain, and with the head, that nothing was cut, added, rewritten or restarted.
 */
import { readHead, type AuditHead, type AuditHeadRef, writerId } from './head.js';
import { foreignSegments, ownAfter, type AuditVerification, type Walk, walkChain } from './chain.js';
import { readOptionalFile } from '../../base/optional-file.js';

/** A write interrupted by a kill stops at a page boundary of the file. */
const PAGE_BYTES = 4096;

export interface VerifyOptions {
  /** The log's head; without it only the chain itself is checked. */
  head?: AuditHeadRef | undefined;
}

export function ownAfterHeadProblem(own: number, head: AuditHead, said: string): string {
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

/**
 * Walk the chain and, given the head, compare its length and last hash with it. Detects an edited,
 * inserted, deleted or reordered line, a non-canonical line, a torn final line, and (with the head) a
 * cut tail, an emptied, deleted or wholly rewritten log. See docs/permissions.md for what it cannot see.
 */
export async function verifyAuditLog(file: string, options: VerifyOptions = {}): Promise<AuditVerification> {
  const buf = (await readOptionalFile(file)) ?? Buffer.alloc(0);
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
