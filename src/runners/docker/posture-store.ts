import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { MacRecordStore } from '../../project/mac-record-store.js';
import type { StateKey } from '../../project/state-key.js';
import { parseStrictJson } from '../../base/strict-json.js';
import type { EngineIdentity } from './engine.js';
import { MANAGED_LABEL, ROLE_LABEL } from './labels.js';
import type { MeasuredPosture } from './posture.js';

/** The role label of a canary a stored measurement names (kept on the daemon between processes). */
export const KEPT_CANARY_ROLE = 'posture-canary';

const identitySchema = z
  .strictObject({
    id: z.string(),
    name: z.string(),
    rootDir: z.string(),
    serverVersion: z.string(),
    host: z.string(),
    socket: z
      .strictObject({ path: z.string(), realPath: z.string(), dev: z.number(), ino: z.number() })
      .optional()
      .describe('The socket a unix:// address led to: dockerd makes a new one each time it starts.'),
    canary: z.string().regex(/^capsule-posture-[0-9a-f]{32}$/),
    config: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  })
  .describe('The daemon the posture was measured on (EngineIdentity).');

const postureSchema = z.strictObject({
  capEff: z.string(),
  noNewPrivs: z.number().nullable(),
  seccomp: z.number().nullable(),
  uid: z.number().nullable(),
  interfaces: z.array(z.string()),
  readOnlyRoot: z.boolean(),
  runtime: z.string(),
});

const recordSchema = z
  .strictObject({
    schemaVersion: z.literal(1),
    address: z.string().describe('Where the engine is reached: what the record is filed and MACed under.'),
    identity: identitySchema,
    posture: postureSchema,
    measuredAt: z.number().describe('When the probe ran (milliseconds since the epoch).'),
    probe: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .describe(
        "The probe container's id: the daemon's event log holds its creation while it is the same process.",
      ),
    witness: z
      .strictObject({
        id: z.string().regex(/^[0-9a-f]{64}$/),
        since: z.number(),
      })
      .optional()
      .describe(
        "A container's creation the daemon logged after the probe, with no reload between (checked by a later process): the log need only reach back to it. Absent: the probe's own creation.",
      ),
    mac: z
      .string()
      .describe('HMAC-SHA256 with the per-user key (StateKey) of the other fields, for `address`.'),
  })
  .describe(
    "One engine's measured posture, kept so that the next process on the same daemon skips the probe.",
  );

export type StoredPosture = Omit<z.infer<typeof recordSchema>, 'mac' | 'schemaVersion'>;

/**
 * Engines' measured postures in the per-user state folder (`<stateDir>/engine-posture/<hash of address>.json`),
 * so that each new capsule process does not probe a daemon it measured before.
 *
 * Trust: a record is a hint about the daemon, checked before it is used (engine-pool.ts): its MAC with the
 * per-user key (a record capsule did not write, or one edited, is ignored and the engine measured again), then
 * the daemon answering now must be the one measured — it holds the record's canary volume, reports the same
 * identity and configuration, reached through the same socket (dockerd makes a new one when it starts), and its
 * own event log still holds the probe, or a later witness (the log lives in the daemon's memory: a restarted daemon
 * has none of it), with no reload since. Anything else, or anything that cannot be checked, and the engine is measured again.
 */
export class PostureStore extends MacRecordStore {
  constructor(options: { stateDir: string; key: StateKey }) {
    super(options, 'engine-posture', 'engine-posture');
  }

  fileFor(address: string): string {
    return this.recordFile(address);
  }

  /** The record for `address` when it is capsule's own (its MAC verifies), else undefined. */
  async load(address: string): Promise<StoredPosture | undefined> {
    let text: string;
    try {
      text = await readFile(this.fileFor(address), 'utf8');
    } catch {
      return undefined;
    }
    const json = parseStrictJson(text);
    const parsed = json.ok ? recordSchema.safeParse(json.value) : undefined;
    if (parsed?.success !== true) return undefined;
    const { mac, schemaVersion: _v, ...body } = parsed.data;
    if (body.address !== address) return undefined;
    const ok = await this.verify(address, body, mac).catch(() => false);
    return ok ? body : undefined;
  }

  /** Keep a measurement; best effort (a failure to write costs the next process a probe). */
  async save(record: StoredPosture): Promise<void> {
    try {
      const mac = await this.sign(record.address, record);
      await this.writeRecord(
        this.fileFor(record.address),
        JSON.stringify({ schemaVersion: 1, ...record, mac }),
      );
    } catch {
      // Not kept: measured again next time.
    }
  }
}

/** A canary kept on the daemon for the stored measurement (no owner pid in its name: no reaper removes it). */
export function keptCanary(labels: Record<string, string>): {
  name: string;
  labels: Record<string, string>;
  keep: true;
} {
  return {
    name: `capsule-posture-${randomBytes(16).toString('hex')}`,
    labels: { ...labels, [MANAGED_LABEL]: '1', [ROLE_LABEL]: KEPT_CANARY_ROLE },
    keep: true,
  };
}

/** Whether `now` is the daemon `stored` names, as far as its identity shows (the canary is checked by the pin). */
export function sameDaemon(stored: StoredPosture['identity'], now: EngineIdentity): boolean {
  const a = stored.socket;
  const b = now.socket;
  const sameSocket =
    a === undefined
      ? b === undefined
      : b !== undefined &&
        a.path === b.path &&
        a.realPath === b.realPath &&
        a.dev === b.dev &&
        a.ino === b.ino;
  return (
    sameSocket &&
    stored.canary === now.canary &&
    stored.id === now.id &&
    stored.name === now.name &&
    stored.rootDir === now.rootDir &&
    stored.serverVersion === now.serverVersion &&
    stored.host === now.host &&
    now.config !== undefined &&
    stored.config === now.config
  );
}

/**
 * The creation the daemon's log must still hold for the record to be reused, and from when (seconds, the
 * daemon's clock for a witness, this host's less a margin for the probe).
 */
export function witnessOf(stored: StoredPosture): { id: string; since: number } {
  return stored.witness ?? { id: stored.probe, since: stored.measuredAt / 1000 - 5 };
}

/** A posture as stored (a copy: no shared arrays with the caller). */
export function postureOf(stored: StoredPosture): MeasuredPosture {
  return { ...stored.posture, interfaces: [...stored.posture.interfaces] };
}
