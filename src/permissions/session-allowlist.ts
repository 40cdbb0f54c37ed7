import { CapsuleError } from '../base/errors.js';
import { grantCovers, isWildcardGrant } from './keys.js';
import type { PermissionRequest } from './types.js';

/** Injected time source (ms since the epoch), so TTL tests need no real waiting. */
export interface Clock {
  now(): number;
}

export function systemClock(): Clock {
  return { now: () => Date.now() };
}

export interface SessionGrantOptions {
  /** Time to live in ms from now; omitted: never expires (within this session). */
  ttlMs?: number | undefined;
  /** Number of allowed uses; omitted: unlimited. */
  uses?: number | undefined;
  /** Bind to a capability content hash: a changed capability is not covered. */
  contentHash?: string | undefined;
  /** Who granted it: `--grant`, `prompt`, … */
  origin?: string | undefined;
}

export interface SessionEntry {
  key: string;
  /** ms since the epoch, or null: never. */
  expiresAt: number | null;
  /** Uses left, or null: unlimited. */
  usesLeft: number | null;
  contentHash?: string | undefined;
  origin: string;
}

export type SessionLookup = { found: true; entry: SessionEntry } | { found: false; reason: string };

/**
 * The session allowlist: `(tool, key) → expiry`, in memory, gone with the session, with an optional
 * use count and content-hash binding. Keys already carry their tool (`tool:action`).
 */
export class SessionAllowlist {
  private readonly entries = new Map<string, SessionEntry>();

  constructor(private readonly clock: Clock) {}

  add(key: string, options: SessionGrantOptions = {}): SessionEntry {
    if (options.ttlMs !== undefined && !(options.ttlMs > 0)) {
      throw new CapsuleError('USAGE', `A session grant's ttlMs must be positive, got ${options.ttlMs}.`, {
        key,
      });
    }
    if (options.uses !== undefined && !(Number.isInteger(options.uses) && options.uses > 0)) {
      throw new CapsuleError(
        'USAGE',
        `A session grant's uses must be a positive integer, got ${options.uses}.`,
        {
          key,
        },
      );
    }
    const entry: SessionEntry = {
      key,
      expiresAt: options.ttlMs === undefined ? null : this.clock.now() + options.ttlMs,
      usesLeft: options.uses ?? null,
      contentHash: options.contentHash,
      origin: options.origin ?? 'session',
    };
    this.entries.set(key, entry);
    return entry;
  }

  remove(key: string): boolean {
    return this.entries.delete(key);
  }

  list(): SessionEntry[] {
    this.sweep();
    return [...this.entries.values()].map((e) => ({ ...e }));
  }

  /** Pure lookup (nothing consumed): the first live entry covering the request. */
  find(request: PermissionRequest): SessionLookup {
    const now = this.clock.now();
    let why = 'no session grant covers this key';
    const candidates: SessionEntry[] = [];
    const exact = this.entries.get(request.key.raw);
    if (exact !== undefined) candidates.push(exact);
    for (const e of this.entries.values()) {
      if (e !== exact && isWildcardGrant(e.key) && grantCovers(e.key, request.key)) candidates.push(e);
    }
    for (const e of candidates) {
      if (e.expiresAt !== null && now >= e.expiresAt) {
        why = `session grant ${e.key} expired`;
        continue;
      }
      if (e.usesLeft !== null && e.usesLeft <= 0) {
        why = `session grant ${e.key} has no uses left`;
        continue;
      }
      if (e.contentHash !== undefined && e.contentHash !== request.contentHash) {
        why = `session grant ${e.key} was for different content (the capability changed)`;
        continue;
      }
      return { found: true, entry: e };
    }
    return { found: false, reason: why };
  }

  /**
   * Take one use of an entry found by find(), in the same synchronous step as the decision: two
   * concurrent checks can never both spend the last use, and the TTL is judged at that same instant.
   * False when the entry is no longer live (expired, exhausted or removed); an exhausted entry is dropped.
   */
  reserve(entry: SessionEntry): boolean {
    if (this.entries.get(entry.key) !== entry) return false;
    if (entry.expiresAt !== null && this.clock.now() >= entry.expiresAt) return false;
    if (entry.usesLeft === null) return true;
    if (entry.usesLeft <= 0) return false;
    entry.usesLeft -= 1;
    if (entry.usesLeft <= 0) this.entries.delete(entry.key);
    return true;
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [k, e] of this.entries) if (e.expiresAt !== null && now >= e.expiresAt) this.entries.delete(k);
  }
}
