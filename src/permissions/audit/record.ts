/**
 * One record of the audit log: the event the engine reports, the line's schema, its one canonical
 * serialization and its hash (what a line must be, byte for byte, to be a record).
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { parseStrictJson } from '../../base/strict-json.js';
import type { DeniedBy } from '../../base/errors.js';
import type { NetworkAuditFields } from '../types.js';

export const GENESIS_HASH = '0'.repeat(64);

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

export const HEX64 = /^[0-9a-f]{64}$/;

const WRITER_ID = /^[0-9a-f]{16}$/;

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

export type AuditBody = Omit<AuditRecord, 'hash'>;

export interface AuditSink {
  append(event: AuditEvent): Promise<void>;
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
export function lineFor(body: AuditBody): { line: string; hash: string } {
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
export function checkLine(bytes: Uint8Array): LineCheck {
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

/** The log's own records: a log adopted without a head, a torn line removed, a new chain. */
export const AUDIT_TOOL = 'audit';

export const ANCHOR_KEY = 'audit:anchor';

export const RESTART_KEY = 'audit:restart';

export function auditNote(reason: string, key = 'audit:log'): AuditEvent {
  return { tool: AUDIT_TOOL, key, decision: 'allow', source: 'audit', reason, mode: '-' };
}
