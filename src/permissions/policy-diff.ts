import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { enginesSchema, type DockerEngineConfig, type EnginesConfig } from '../project/engines.js';
import {
  normalizeAllowlist,
  PERMISSION_MODES,
  PROJECT_ENTRY_LEVELS,
  type AllowlistEntryInput,
  type ProjectConfig,
} from '../project/project-config.js';
import { promptSafe } from './prompter.js';
import { PROFILES_DIR } from '../project/protected-state.js';

/**
 * The policy part of a project: what decides whether a call may run. capsule.json's mode, rules
 * and allowlist (levels and bound hashes; `grantedAt`/`note` are informational and left out) and the
 * project's agent profiles (by content hash), and the Docker engines calls may go to (an engine gets
 * every docker call's files and input, so a repository's file must not point them elsewhere by itself).
 * `roots` is not policy: it only says where to look.
 */
export const policyViewSchema = z.strictObject({
  mode: z.enum(PERMISSION_MODES),
  allow: z.array(z.string()),
  deny: z.array(z.string()),
  allowlist: z.record(
    z.string(),
    z.strictObject({ level: z.enum(PROJECT_ENTRY_LEVELS), contentHash: z.string().optional() }),
  ),
  /** Project profile file name (under .capsule/profiles) → sha256 of its text. */
  profiles: z.record(z.string(), z.string()),
  /** capsule.json `engines`; absent when none (so snapshots from before engines were policy still verify). */
  engines: enginesSchema.optional(),
});

export type PolicyView = z.infer<typeof policyViewSchema>;
export type ProfileHashes = Record<string, string>;

/** A change of policy, as a person is shown it before confirming. */
export interface PolicyDiff {
  mode?: { from: string; to: string } | undefined;
  allowAdded: string[];
  allowRemoved: string[];
  denyAdded: string[];
  denyRemoved: string[];
  allowlistAdded: string[];
  allowlistRemoved: string[];
  allowlistChanged: string[];
  profilesAdded: string[];
  profilesRemoved: string[];
  profilesChanged: string[];
  enginesAdded: string[];
  enginesRemoved: string[];
  enginesChanged: string[];
}

/** What a confirmer is asked: the file, the diff, and the lines a person reads. */
export interface PolicyChange {
  file: string;
  diff: PolicyDiff;
  /** The diff as text lines, agent-controlled parts escaped. */
  lines: string[];
  /** `lines` joined, with a heading. */
  text: string;
}

/** The human side of a policy change: terminal prompt, MCP elicitation; true adopts it. */
export type PolicyConfirmer = (change: PolicyChange, signal?: AbortSignal) => Promise<boolean>;

/** One engine's settings in a fixed key order, so equal settings compare and hash equal. */
function canonicalEngine(e: DockerEngineConfig): DockerEngineConfig {
  const tls = e.tls !== undefined ? { tls: { ca: e.tls.ca, cert: e.tls.cert, key: e.tls.key } } : {};
  return e.type === 'swarm'
    ? { type: 'swarm', manager: e.manager, ...tls }
    : { type: 'docker', host: e.host, ...tls };
}

/** Engines sorted by name, each canonical; undefined when there are none. */
function canonicalEngines(engines: EnginesConfig | undefined): EnginesConfig | undefined {
  const names = Object.keys(engines ?? {}).sort();
  if (engines === undefined || names.length === 0) return undefined;
  const out: EnginesConfig = {};
  for (const name of names) out[name] = canonicalEngine(engines[name] as DockerEngineConfig);
  return out;
}

/** Where an engine answers, as a person reads it in a difference. */
function engineLabel(e: DockerEngineConfig): string {
  return `${e.type} ${e.type === 'swarm' ? e.manager : e.host}${e.tls !== undefined ? ` (tls ca ${e.tls.ca})` : ''}`;
}

export function policyViewOf(config: ProjectConfig, profiles: ProfileHashes = {}): PolicyView {
  const allowlist: PolicyView['allowlist'] = {};
  for (const e of normalizeAllowlist(config.allowlist).sort((a, b) => (a.key < b.key ? -1 : 1))) {
    allowlist[e.key] =
      e.contentHash !== undefined ? { level: e.level, contentHash: e.contentHash } : { level: e.level };
  }
  const sortedProfiles: ProfileHashes = {};
  for (const name of Object.keys(profiles).sort()) sortedProfiles[name] = profiles[name] as string;
  const engines = canonicalEngines(config.engines);
  return {
    mode: config.mode,
    allow: [...config.permissions.allow],
    deny: [...config.permissions.deny],
    allowlist,
    profiles: sortedProfiles,
    ...(engines !== undefined ? { engines } : {}),
  };
}

/** The confirmed policy as a capsule.json to run with: `roots` and the rest from the file on disk. */
export function configWithPolicy(onDisk: ProjectConfig, view: PolicyView): ProjectConfig {
  const allowlist: Record<string, AllowlistEntryInput> = {};
  for (const [key, entry] of Object.entries(view.allowlist)) allowlist[key] = { ...entry };
  return {
    ...onDisk,
    mode: view.mode,
    permissions: { allow: [...view.allow], deny: [...view.deny] },
    allowlist,
    engines: view.engines !== undefined ? { ...view.engines } : undefined,
  };
}

/** The view without engines: what a project's files may adopt before any person confirmed them. */
export function withoutEngines(view: PolicyView): PolicyView {
  const { engines: _engines, ...rest } = view;
  return rest;
}

/** Modes from the one that allows least to the one that allows most. */
const MODE_ORDER = ['plan', 'default', 'edit', 'bypass'] as const;

/**
 * Pure: the confirmed policy with every change on disk that only takes something away applied —
 * a removed allow rule or allowlist entry, an added deny rule or Deny entry, a stricter mode. What
 * would widen anything, and every change of a profile, stays out until a person confirms it. A person's hand edit that tightens the policy therefore never waits for a confirmation.
 */
export function tightenOnly(confirmed: PolicyView, onDisk: PolicyView): PolicyView {
  const diskAllow = new Set(onDisk.allow);
  const allowlist: PolicyView['allowlist'] = {};
  for (const [key, entry] of Object.entries(confirmed.allowlist)) {
    const disk = onDisk.allowlist[key];
    if (disk === undefined) continue;
    if (disk.level === 'Deny') allowlist[key] = { level: 'Deny' };
    else if (JSON.stringify(disk) === JSON.stringify(entry)) allowlist[key] = entry;
  }
  for (const [key, entry] of Object.entries(onDisk.allowlist)) {
    if (entry.level === 'Deny') allowlist[key] = { level: 'Deny' };
  }
  // Profiles are kept as confirmed: a changed or removed project profile is not a tightening (the
  // built-in profile of the same name may allow more), so it waits for a person like any widening.
  const profiles: ProfileHashes = { ...confirmed.profiles };
  const mode =
    MODE_ORDER.indexOf(onDisk.mode) < MODE_ORDER.indexOf(confirmed.mode) ? onDisk.mode : confirmed.mode;
  // An engine removed on disk is dropped at once (fewer places calls may go); an added one, or a
  // confirmed name whose settings changed (another host, other TLS files), waits for a person.
  const engines: EnginesConfig = {};
  for (const [name, engine] of Object.entries(confirmed.engines ?? {})) {
    const disk = onDisk.engines?.[name];
    if (disk !== undefined && JSON.stringify(disk) === JSON.stringify(engine)) engines[name] = engine;
  }
  const sorted: PolicyView['allowlist'] = {};
  for (const key of Object.keys(allowlist).sort())
    sorted[key] = allowlist[key] as PolicyView['allowlist'][string];
  return {
    mode,
    allow: confirmed.allow.filter((r) => diskAllow.has(r)),
    deny: [...new Set([...confirmed.deny, ...onDisk.deny])],
    allowlist: sorted,
    profiles,
    ...(Object.keys(engines).length > 0 ? { engines } : {}),
  };
}

/** sha256 of the view's canonical JSON (keys are sorted by policyViewOf). */
export function policyHash(view: PolicyView): string {
  return `sha256:${createHash('sha256').update(JSON.stringify(view)).digest('hex')}`;
}

function added(from: readonly string[], to: readonly string[]): string[] {
  const had = new Set(from);
  return to.filter((x) => !had.has(x));
}

export function diffPolicy(from: PolicyView, to: PolicyView): PolicyDiff {
  const keysFrom = Object.keys(from.allowlist);
  const keysTo = Object.keys(to.allowlist);
  const profFrom = Object.keys(from.profiles);
  const profTo = Object.keys(to.profiles);
  const engFrom = Object.keys(from.engines ?? {});
  const engTo = Object.keys(to.engines ?? {});
  return {
    mode: from.mode !== to.mode ? { from: from.mode, to: to.mode } : undefined,
    allowAdded: added(from.allow, to.allow),
    allowRemoved: added(to.allow, from.allow),
    denyAdded: added(from.deny, to.deny),
    denyRemoved: added(to.deny, from.deny),
    allowlistAdded: added(keysFrom, keysTo),
    allowlistRemoved: added(keysTo, keysFrom),
    allowlistChanged: keysTo.filter(
      (k) => k in from.allowlist && JSON.stringify(from.allowlist[k]) !== JSON.stringify(to.allowlist[k]),
    ),
    profilesAdded: added(profFrom, profTo),
    profilesRemoved: added(profTo, profFrom),
    profilesChanged: profTo.filter((p) => p in from.profiles && from.profiles[p] !== to.profiles[p]),
    enginesAdded: added(engFrom, engTo),
    enginesRemoved: added(engTo, engFrom),
    enginesChanged: engTo.filter(
      (n) =>
        n in (from.engines ?? {}) && JSON.stringify(from.engines?.[n]) !== JSON.stringify(to.engines?.[n]),
    ),
  };
}

export function isEmptyDiff(d: PolicyDiff): boolean {
  return (
    d.mode === undefined &&
    Object.values(d).every((v) => v === undefined || (Array.isArray(v) && v.length === 0))
  );
}

/** Pure: the diff as lines a person reads (`+` adds or widens, `-` removes, `~` changes). */
export function renderPolicyDiff(d: PolicyDiff, to: PolicyView): string[] {
  const lines: string[] = [];
  const s = (x: string): string => promptSafe(x, 500);
  if (d.mode !== undefined) lines.push(`~ mode: ${s(d.mode.from)} → ${s(d.mode.to)}`);
  for (const r of d.allowAdded) lines.push(`+ allow rule ${s(r)}`);
  for (const r of d.allowRemoved) lines.push(`- allow rule ${s(r)}`);
  for (const r of d.denyAdded) lines.push(`+ deny rule ${s(r)}`);
  for (const r of d.denyRemoved) lines.push(`- deny rule ${s(r)}`);
  const entry = (k: string): string => {
    const e = to.allowlist[k];
    return e === undefined
      ? ''
      : `: ${e.level}${e.contentHash !== undefined ? ` (${s(e.contentHash)})` : ''}`;
  };
  for (const k of d.allowlistAdded) lines.push(`+ allowlist ${s(k)}${entry(k)}`);
  for (const k of d.allowlistRemoved) lines.push(`- allowlist ${s(k)}`);
  for (const k of d.allowlistChanged) lines.push(`~ allowlist ${s(k)}${entry(k)}`);
  for (const p of d.profilesAdded) lines.push(`+ profile ${s(path.join(PROFILES_DIR, p))}`);
  for (const p of d.profilesRemoved) lines.push(`- profile ${s(path.join(PROFILES_DIR, p))}`);
  for (const p of d.profilesChanged)
    lines.push(`~ profile ${s(path.join(PROFILES_DIR, p))} (content changed)`);
  const engine = (n: string): string => {
    const e = to.engines?.[n];
    return e === undefined ? '' : `: ${s(engineLabel(e))}`;
  };
  for (const n of d.enginesAdded) lines.push(`+ engine ${s(n)}${engine(n)}`);
  for (const n of d.enginesRemoved) lines.push(`- engine ${s(n)}`);
  for (const n of d.enginesChanged) lines.push(`~ engine ${s(n)}${engine(n)}`);
  return lines;
}

export function policyChange(file: string, from: PolicyView, to: PolicyView): PolicyChange | undefined {
  const diff = diffPolicy(from, to);
  if (isEmptyDiff(diff)) return undefined;
  const lines = renderPolicyDiff(diff, to);
  const text = `capsule: the policy in ${promptSafe(file)} (or its profiles) differs from the one confirmed:\n${lines
    .map((l) => `  ${l}`)
    .join('\n')}`;
  return { file, diff, lines, text };
}

/** sha256 of a profile's text, as the profile catalog reads it. */
export function profileTextHash(text: string): string {
  return `sha256:${createHash('sha256').update(text, 'utf8').digest('hex')}`;
}

/** The project's profiles on disk: `.capsule/profiles/*.md` → text (undefined: unreadable). */
export async function readProfileTexts(projectRoot: string): Promise<Record<string, string | undefined>> {
  const dir = path.join(projectRoot, PROFILES_DIR);
  let files: string[];
  try {
    files = (await readdir(dir)).filter((f) => f.endsWith('.md')).sort();
  } catch {
    return {};
  }
  const out: Record<string, string | undefined> = {};
  for (const f of files) {
    // Unreadable (a folder named x.md, a dangling link): the catalog cannot load it either.
    out[f] = await readFile(path.join(dir, f), 'utf8').catch(() => undefined);
  }
  return out;
}

/** The project's profiles on disk: `.capsule/profiles/*.md` → hash of each text. */
export async function readProfileHashes(projectRoot: string): Promise<ProfileHashes> {
  const out: ProfileHashes = {};
  for (const [f, text] of Object.entries(await readProfileTexts(projectRoot)))
    out[f] = text === undefined ? 'unreadable' : profileTextHash(text);
  return out;
}
