import path from 'node:path';
import type { Manifest, NetworkGrant } from '../manifest/schema.js';
import { isInside } from '../manifest/paths.js';
import { addressKind } from '../network/addresses.js';
import { protectedStateHit } from '../project/protected-state.js';
import type { Observation } from '../runners/types.js';

type FsGrant = Manifest['grants']['fs'][number];

/** Where a learning run ran, all real paths: what its observations are judged against. */
export interface LearnPlace {
  projectRoot: string;
  /** The capability's own folder, and the staged copy that ran. */
  ownDirs: readonly string[];
  /** Every capability root of the project. */
  capabilityRoots: readonly string[];
  /** capsule's own state: the project's and the per-user cache and state folders. */
  protectedPaths: readonly string[];
  home?: string | undefined;
  tmp: string;
}

/** Why something seen is, or is not, in the proposal. */
export type Verdict =
  | 'proposed'
  | 'own-files'
  | 'capsule-state'
  | 'other-capability'
  | 'not-found'
  | 'not-grantable'
  | 'name-lookup';

/** One thing a learning run did inside the project, or on the network. */
export interface ObservedEntry {
  op: Observation['op'];
  /** Relative to the project root (files). */
  path?: string | undefined;
  host?: string | undefined;
  port?: number | undefined;
  method?: string | undefined;
  outcome: Observation['outcome'];
  via: string;
  verdict: Verdict;
  /** Why, in words (flags of an address: IP literal, loopback, private). */
  note?: string | undefined;
}

/** One thing a learning run reached outside the project: reported with what it is, never proposed. */
export interface OutsideEntry {
  op: Observation['op'];
  path: string;
  outcome: Observation['outcome'];
  what: string;
}

export interface Classified {
  grants: { fs: FsGrant[]; network: NetworkGrant[] };
  observed: ObservedEntry[];
  outside: OutsideEntry[];
}

const WRITES = new Set<Observation['op']>(['write', 'create', 'remove', 'rename']);

function outsideWhat(p: string, place: LearnPlace): string {
  if (place.protectedPaths.some((s) => p === s || isInside(s, p)))
    return "capsule's own state (its per-user cache or state): never granted";
  if (p === place.tmp || isInside(place.tmp, p) || p === '/tmp' || isInside('/tmp', p))
    return 'scratch space (/tmp): a sandbox gives each run a private one';
  if (place.home !== undefined && (p === place.home || isInside(place.home, p)))
    return "the user's home: never granted (grants name project paths only)";
  if (/^\/(proc|sys|dev)(\/|$)/.test(p)) return 'kernel interfaces and devices';
  if (/^\/(usr|lib|lib32|lib64|bin|sbin|etc|opt)(\/|$)/.test(p))
    return "system files (the interpreter's program, libraries and configuration)";
  if (/^\/(run|var\/run)(\/|$)/.test(p)) return "a local service's socket or runtime file";
  return 'outside the project: never granted (grants name project paths only)';
}

function addressNote(host: string): string {
  const bare = host.startsWith('[') ? host.slice(1, -1) : host;
  const kind = addressKind(bare);
  const kindNote = kind === 'public' ? '' : `, a ${kind} (internal) address`;
  return `an IP literal${kindNote}: the tracer sees addresses, not names — write the host name if it has one`;
}

/**
 * Sort what one or more learning runs saw into a proposal (narrowest folders, `ro` unless written; the
 * hosts and ports connected to) and a report. Pure. Never proposes capsule's state, another capability's
 * folder, anything outside the project, or what failed by itself; every such thing is reported instead.
 */
export function classify(observations: readonly Observation[], place: LearnPlace): Classified {
  const observed: ObservedEntry[] = [];
  const outside: OutsideEntry[] = [];
  /** Project-relative folder (or file) → written? */
  const wanted = new Map<string, boolean>();
  const network = new Map<string, { ports: Set<number>; methods: Set<string> }>();
  const root = place.projectRoot;
  const seen = new Set<string>();

  for (const o of observations) {
    const key = JSON.stringify([o.op, o.path, o.host, o.port, o.method, o.outcome]);
    if (seen.has(key)) continue;
    seen.add(key);
    if (o.op === 'connect' || o.op === 'http') {
      if (o.path !== undefined) {
        outside.push({
          op: o.op,
          path: o.path,
          outcome: o.outcome,
          what: "a local service's socket: never granted",
        });
        continue;
      }
      if (o.host === undefined || o.port === undefined) continue;
      const base = { op: o.op, host: o.host, port: o.port, method: o.method, outcome: o.outcome, via: o.via };
      if (o.op === 'connect' && o.port === 53) {
        observed.push({
          ...base,
          verdict: 'name-lookup',
          note: 'a DNS lookup: capsule resolves granted names itself',
        });
        continue;
      }
      const literal = /^[\d.]+$/.test(o.host) || o.host.startsWith('[');
      observed.push({ ...base, verdict: 'proposed', note: literal ? addressNote(o.host) : undefined });
      const entry = network.get(o.host) ?? { ports: new Set<number>(), methods: new Set<string>() };
      entry.ports.add(o.port);
      if (o.method !== undefined) entry.methods.add(o.method);
      network.set(o.host, entry);
      continue;
    }
    if (o.path === undefined) continue;
    const p = o.path;
    if (place.ownDirs.some((d) => p === d || isInside(d, p))) {
      // Its own files run with it (staged, read-only): nothing to grant. Not listed: they are the capability.
      continue;
    }
    if (p !== root && !isInside(root, p)) {
      outside.push({ op: o.op, path: p, outcome: o.outcome, what: outsideWhat(p, place) });
      continue;
    }
    const rel = path.relative(root, p) || '.';
    const entry = { op: o.op, path: rel, outcome: o.outcome, via: o.via };
    const hit = protectedStateHit(root, p, { also: place.protectedPaths, containing: false });
    if (hit !== undefined) {
      observed.push({ ...entry, verdict: 'capsule-state', note: "capsule's own state: never granted" });
      continue;
    }
    const capRoot = place.capabilityRoots.find((r) => p === r || isInside(r, p));
    if (capRoot !== undefined) {
      observed.push({
        ...entry,
        verdict: 'other-capability',
        note: "another capability's folder (or the capability root): never proposed",
      });
      continue;
    }
    if (o.outcome === 'failed') {
      observed.push({
        ...entry,
        verdict: 'not-found',
        note: 'it failed by itself (not there); nothing to grant',
      });
      continue;
    }
    // The narrowest folder that covers it: its own folder for a listing, the folder holding a file otherwise.
    const folder = o.op === 'list' ? rel : path.dirname(rel);
    const target = folder === '.' ? rel : folder;
    if (target === '.') {
      observed.push({
        ...entry,
        verdict: 'not-grantable',
        note: "the project root holds capsule's own state",
      });
      continue;
    }
    observed.push({ ...entry, verdict: 'proposed' });
    wanted.set(target, (wanted.get(target) ?? false) || WRITES.has(o.op));
  }

  return {
    grants: { fs: foldGrants(wanted, observed), network: networkGrants(network) },
    observed,
    outside,
  };
}

/**
 * One grant per folder, none inside another of at least its mode (an `ro` inside an `rw` one is refused by
 * the manifest's rules, and is covered anyway). An `rw` folder inside an `ro` one stays: it is narrower.
 */
function foldGrants(wanted: ReadonlyMap<string, boolean>, observed: ObservedEntry[]): FsGrant[] {
  const entries = [...wanted.entries()].sort(([a], [b]) => a.localeCompare(b));
  const kept: FsGrant[] = [];
  for (const [p, written] of entries) {
    const mode = written ? 'rw' : 'ro';
    const cover = kept.find((g) => p === g.path || isInside(g.path, p));
    if (cover !== undefined && (cover.mode === 'rw' || mode === 'ro')) continue;
    kept.push({ path: p, mode });
  }
  // A ro grant that holds an rw one is fine; one that an rw grant holds was skipped above. Mark what is kept.
  for (const o of observed) {
    if (o.verdict !== 'proposed' || o.path === undefined) continue;
    const g = kept.find((k) => o.path === k.path || isInside(k.path, o.path as string));
    if (g !== undefined)
      o.note = `${o.outcome === 'refused' ? 'refused in the learning run; ' : ''}covered by ${g.path} (${g.mode})`;
  }
  return kept;
}

function networkGrants(
  hosts: ReadonlyMap<string, { ports: ReadonlySet<number>; methods: ReadonlySet<string> }>,
): NetworkGrant[] {
  return [...hosts.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([host, { ports, methods }]) => {
      const grant: NetworkGrant = { host, ports: [...ports].sort((a, b) => a - b) };
      // Methods only when every request showed a plain one: a tunnel (CONNECT) hides it.
      const plain = [...methods].filter((m) => m !== 'CONNECT');
      if (plain.length > 0 && plain.length === methods.size)
        grant.methods = plain.sort() as NetworkGrant['methods'];
      return grant;
    });
}
