import { lookup } from 'node:dns/promises';
import { CapsuleError } from '../base/errors.js';
import type { NetworkGrant } from '../manifest/schema.js';
import type { Capability } from '../manifest/types.js';
import type { EgressRecord } from '../permissions/types.js';
import { checkAddress, ipLiteral, matchGrant, type EgressTarget } from './policy.js';

/** One address a host name resolved to. */
export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/**
 * Host name → addresses. The system resolver by default; the runners take another one only as a
 * constructor option (tests map names to loopback listeners), never from a manifest.
 */
export type Resolver = (host: string) => Promise<ResolvedAddress[]>;

const systemResolver: Resolver = async (host) => {
  const found = await lookup(host, { all: true, verbatim: true });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

/** Where a run's network records go (the permission engine's audit log). */
export type EgressAudit = (record: EgressRecord) => Promise<void>;

/** An allowed request: connect to `address` (the one checked, never a fresh lookup) and count its bytes. */
export interface EgressPermit {
  readonly address: string;
  readonly family: 4 | 6;
  readonly target: EgressTarget;
  /** Count bytes sent (out) or received (in); false once the run's byte cap is passed: cut the connection. */
  count(direction: 'out' | 'in', bytes: number): boolean;
  /** Whether `bytes` more would stay within the run's byte cap (for a body not sent yet: nothing is counted). */
  fits(bytes: number): boolean;
  /** The request is over (once; later calls do nothing): its record goes to the audit log. */
  end(note?: string): Promise<void>;
}

export interface EgressSessionOptions {
  capability: Pick<Capability, 'name' | 'contentHash' | 'manifest'>;
  resolve?: Resolver | undefined;
  audit?: EgressAudit | undefined;
}

/**
 * The network of one run: every request is matched against the grants, resolved, its addresses checked,
 * counted against `limits.networkRequests` / `limits.networkBytes`, and audited. Denials throw
 * PERMISSION_DENIED after their record is written.
 */
export class EgressSession {
  readonly grants: readonly NetworkGrant[];
  readonly #capability: EgressSessionOptions['capability'];
  readonly #resolve: Resolver;
  readonly #audit: EgressAudit;
  readonly #maxRequests: number;
  readonly #maxBytes: number;
  #requests = 0;
  #bytes = 0;
  readonly #open = new Set<EgressPermit>();
  readonly #pending = new Set<Promise<void>>();
  /** Aborted when the run ends: requests still in flight on its behalf are cut. */
  readonly #over = new AbortController();
  #closed = false;

  constructor(options: EgressSessionOptions) {
    this.#capability = options.capability;
    this.grants = options.capability.manifest.grants.network;
    this.#resolve = options.resolve ?? systemResolver;
    this.#audit = options.audit ?? (() => Promise.resolve());
    this.#maxRequests = options.capability.manifest.limits.networkRequests;
    this.#maxBytes = options.capability.manifest.limits.networkBytes;
  }

  /** Fires when the run is over (capsule's own requests for the run listen to it). */
  get signal(): AbortSignal {
    return this.#over.signal;
  }

  /** Requests made so far (allowed or not) and bytes moved, for reports and tests. */
  get usage(): { requests: number; bytes: number } {
    return { requests: this.#requests, bytes: this.#bytes };
  }

  async authorize(target: EgressTarget): Promise<EgressPermit> {
    if (this.#closed) return this.#deny(target, 'the run is over');
    this.#requests += 1;
    if (this.#requests > this.#maxRequests)
      return this.#deny(
        target,
        `the run made more than limits.networkRequests (${this.#maxRequests}) requests`,
      );
    if (this.#bytes >= this.#maxBytes)
      return this.#deny(target, `the run used up limits.networkBytes (${this.#maxBytes})`);
    const match = matchGrant(this.grants, target);
    if (!match.ok) return this.#deny(target, match.reason);
    const literal = ipLiteral(target.host);
    let addresses: ResolvedAddress[];
    if (literal !== undefined) {
      addresses = [{ address: literal, family: literal.includes(':') ? 6 : 4 }];
    } else {
      try {
        addresses = await this.#resolve(target.host);
      } catch (err) {
        return this.#deny(
          target,
          `${target.host} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
        );
      }
    }
    if (addresses.length === 0) return this.#deny(target, `${target.host} does not resolve`);
    // Every address must pass: a name that answers with one public and one internal address is refused,
    // so which one a client would pick never matters.
    for (const a of addresses) {
      const verdict = checkAddress(match.grant, target, a.address);
      if (!verdict.ok) return this.#deny(target, verdict.reason);
    }
    const chosen = addresses[0] as ResolvedAddress;
    return this.#permit(target, chosen, `allowed by grants.network[${match.index}] (${match.grant.host})`);
  }

  /** Waits for every record; permits still open are ended first (the run is over). */
  async close(): Promise<void> {
    this.#closed = true;
    this.#over.abort();
    await Promise.all([...this.#open].map((p) => p.end('open when the run ended')));
    await Promise.all([...this.#pending]);
  }

  #record(record: EgressRecord): Promise<void> {
    const job = this.#audit(record);
    const tracked = job.finally(() => this.#pending.delete(tracked));
    this.#pending.add(tracked);
    return job;
  }

  async #deny(target: EgressTarget, reason: string): Promise<never> {
    const { name, contentHash } = this.#capability;
    // The denial is recorded before the capability hears of it; a record that cannot be written is
    // still a denial.
    await this.#record({
      capability: name,
      contentHash,
      ...target,
      decision: 'deny',
      reason,
      bytesOut: 0,
      bytesIn: 0,
    }).catch(() => {});
    throw new CapsuleError(
      'PERMISSION_DENIED',
      `capsule refused ${target.method} ${target.host}:${target.port}: ${reason}`,
      {
        key: `network:${target.host}:${target.port}`,
        field: 'grants.network',
      },
    );
  }

  #permit(target: EgressTarget, resolved: ResolvedAddress, reason: string): EgressPermit {
    let bytesOut = 0;
    let bytesIn = 0;
    let cut: string | undefined;
    let ended: Promise<void> | undefined;
    const permit: EgressPermit = {
      address: resolved.address,
      family: resolved.family,
      target,
      count: (direction, bytes) => {
        if (direction === 'out') bytesOut += bytes;
        else bytesIn += bytes;
        this.#bytes += bytes;
        if (this.#bytes > this.#maxBytes) {
          cut ??= `cut at limits.networkBytes (${this.#maxBytes})`;
          return false;
        }
        return true;
      },
      fits: (bytes) => this.#bytes + bytes <= this.#maxBytes,
      end: (note) => {
        if (ended !== undefined) return ended;
        this.#open.delete(permit);
        const notes = [reason, cut, note].filter((n) => n !== undefined).join('; ');
        ended = this.#record({
          capability: this.#capability.name,
          contentHash: this.#capability.contentHash,
          ...target,
          address: resolved.address,
          decision: 'allow',
          reason: notes,
          bytesOut,
          bytesIn,
        }).catch(() => {});
        return ended;
      },
    };
    this.#open.add(permit);
    return permit;
  }
}
