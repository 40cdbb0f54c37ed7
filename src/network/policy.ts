import { isIP } from 'node:net';
import type { NetworkGrant } from '../manifest/schema.js';
import { addressKind, inRanges, unmapped } from './addresses.js';

/**
 * The egress policy: pure decisions over a capability's `grants.network` (see docs/network.md). The proxy,
 * the Wasm host's fetch and every other path ask these same functions, so a host means one thing everywhere.
 */

/** One request as capsule sees it: the host as written (normalized), its port, and its HTTP method. */
export interface EgressTarget {
  /** Lower case, no trailing dot; an IPv6 literal in brackets; an IPv4 literal in dotted form. */
  host: string;
  port: number;
  /** `CONNECT` for a tunnel (whose HTTP method capsule cannot see). */
  method: string;
}

export type HostDecision = { ok: true; grant: NetworkGrant; index: number } | { ok: false; reason: string };

const DEFAULT_PORTS: readonly number[] = [443, 80];

/**
 * Normalize a host as a URL parser would (`2130706433` and `0x7f.1` are 127.0.0.1, `EXAMPLE.com.` is
 * example.com), so a host cannot be written in a form that slips past a grant. Undefined: not a host.
 */
export function normalizeHost(raw: string): string | undefined {
  if (raw === '' || /[\s/?#@\\]/.test(raw)) return undefined;
  let host: string;
  try {
    host = new URL(`http://${raw}/`).hostname;
  } catch {
    return undefined;
  }
  if (host === '') return undefined;
  return host.endsWith('.') ? host.slice(0, -1) : host;
}

/** The IP a normalized host is, without brackets, or undefined for a name. */
export function ipLiteral(host: string): string | undefined {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return isIP(bare) !== 0 ? bare : undefined;
}

function hostMatches(pattern: string, host: string): boolean {
  if (pattern.startsWith('*.')) {
    // Subdomains only; an IP literal never matches a name pattern.
    return (
      ipLiteral(host) === undefined && host.endsWith(pattern.slice(1)) && host.length > pattern.length - 1
    );
  }
  return (normalizeHost(pattern) ?? pattern) === host;
}

/** Pure: which grant covers `target`, or why none does. */
export function matchGrant(grants: readonly NetworkGrant[], target: EgressTarget): HostDecision {
  const forHost = grants
    .map((grant, index) => ({ grant, index }))
    .filter(({ grant }) => hostMatches(grant.host, target.host));
  if (forHost.length === 0) {
    return {
      ok: false,
      reason:
        ipLiteral(target.host) !== undefined
          ? `${target.host} is an IP address no grant names (grants.network grants IP literals only by name)`
          : `${target.host} is not in grants.network`,
    };
  }
  const forPort = forHost.filter(({ grant }) => (grant.ports ?? DEFAULT_PORTS).includes(target.port));
  if (forPort.length === 0) {
    return {
      ok: false,
      reason: `port ${target.port} of ${target.host} is not granted (ports: ${forHost.map(({ grant }) => (grant.ports ?? DEFAULT_PORTS).join(', ')).join('; ')})`,
    };
  }
  for (const { grant, index } of forPort) {
    if (grant.methods === undefined) return { ok: true, grant, index };
    if (target.method !== 'CONNECT' && (grant.methods as readonly string[]).includes(target.method))
      return { ok: true, grant, index };
  }
  return {
    ok: false,
    reason:
      target.method === 'CONNECT'
        ? `a tunnel (CONNECT) to ${target.host} is refused: its grant limits methods, which capsule cannot see inside a tunnel`
        : `method ${target.method} is not granted for ${target.host}`,
  };
}

/**
 * Pure: whether the connection may go to `address`, which `target.host` resolved to. Private, loopback,
 * link-local and reserved addresses need the grant to name them (in `internal`, or as the host itself).
 */
export function checkAddress(
  grant: NetworkGrant,
  target: EgressTarget,
  address: string,
): { ok: true } | { ok: false; reason: string } {
  const kind = addressKind(address);
  if (kind === 'public') return { ok: true };
  const literal = ipLiteral(target.host);
  if (literal !== undefined && unmapped(literal) === unmapped(address)) return { ok: true };
  if (grant.internal !== undefined && inRanges(address, grant.internal)) return { ok: true };
  return {
    ok: false,
    reason: `${target.host} resolves to ${address}, a ${kind} address its grant does not name (list it in "internal" to allow it)`,
  };
}

/** Pure: one grant as a person reads it, e.g. `api.example.com:443 (GET, HEAD)`. */
export function describeGrant(grant: NetworkGrant): string {
  const ports = (grant.ports ?? DEFAULT_PORTS).join(',');
  const parts = [`${grant.host}:${ports}`];
  if (grant.methods !== undefined) parts.push(`(${grant.methods.join(', ')})`);
  if (grant.internal !== undefined) parts.push(`[internal ${grant.internal.join(', ')}]`);
  return parts.join(' ');
}

/** Pure: the hosts of a capability for prompts, `show`, `explain` and the isolation report. */
export function describeGrants(grants: readonly NetworkGrant[]): string {
  return grants.map(describeGrant).join('; ');
}
