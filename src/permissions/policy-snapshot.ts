import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { readOptionalFile } from '../base/optional-file.js';
import { MacRecordStore } from '../project/mac-record-store.js';
import type { ProjectConfig } from '../project/project-config.js';
import { parseStrictJson } from '../base/strict-json.js';
import type { StateKey } from '../project/state-key.js';
import { CapsuleError } from '../base/errors.js';
import {
  configWithPolicy,
  policyChange,
  policyHash,
  policyViewOf,
  policyViewSchema,
  profileTextHash,
  readProfileTexts,
  tightenOnly,
  type PolicyChange,
  type PolicyView,
  type ProfileHashes,
  withoutEngines,
} from './policy-diff.js';

const snapshotBodySchema = z.strictObject({
  schemaVersion: z.literal(2),
  root: z.string().describe('Real path of the project root the snapshot belongs to.'),
  hash: z.string().describe('policyHash of `policy`.'),
  policy: policyViewSchema.describe('The policy a person last confirmed for this project.'),
  profileTexts: z
    .record(z.string(), z.string())
    .default({})
    .describe(
      'The confirmed project profiles themselves (file → text), so a changed or deleted one still loads as confirmed.',
    ),
  confirmedAt: z.string().describe('ISO time of the confirmation.'),
  by: z.string().describe('Which human path confirmed it (capsule reload, a prompt answer, first use).'),
});

const snapshotSchema = snapshotBodySchema
  .extend({
    mac: z
      .string()
      .optional()
      .describe(
        "HMAC-SHA256 with the per-user key (StateKey) of every other field, for this file's name: what makes it capsule's.",
      ),
  })
  .describe('A confirmed policy snapshot, one file per project under the per-user state folder.');

export type PolicySnapshot = z.infer<typeof snapshotBodySchema>;

/** Why a snapshot file on disk is not a confirmation. */
export type UntrustedSnapshotKind =
  /**
   * Its MAC does not verify with this user's key for this file (written by something that does not
   * hold the key, or copied from another project or another state folder), or it contradicts itself.
   */
  | 'forged'
  /** Written by an earlier capsule, before snapshots were authenticated. */
  | 'unauthenticated'
  /** Not a snapshot at all (not JSON, unknown fields). */
  | 'broken';

/** What the snapshot file of a project says. */
export type SnapshotRead =
  | { state: 'none'; file: string }
  | { state: 'confirmed'; file: string; snapshot: PolicySnapshot }
  | { state: 'untrusted'; file: string; kind: UntrustedSnapshotKind; problem: string };

/** The last confirmed policy of each project, kept in capsule's per-user state folder. */
export class PolicySnapshotStore extends MacRecordStore {
  constructor(options: { stateDir: string; key: StateKey }) {
    super(options, 'policy', 'policy-snapshot');
  }

  /** The snapshot file of a project: keyed by the sha256 of the root's real path. */
  async fileFor(projectRoot: string): Promise<{ root: string; file: string }> {
    const root = await realpath(projectRoot).catch(() => path.resolve(projectRoot));
    return { root, file: this.recordFile(root) };
  }

  /**
   * The project's snapshot, judged: a confirmation only when capsule wrote it with this user's key
   * for this project. Anything else there is `untrusted` — never taken for "no snapshot yet", which
   * would let whoever deleted or replaced it have the files taken as they are.
   */
  async load(projectRoot: string): Promise<SnapshotRead> {
    const { root, file } = await this.fileFor(projectRoot);
    const text = await readOptionalFile(
      file,
      'utf8',
      (err) =>
        new CapsuleError(
          'CONFIG_INVALID',
          `${file} cannot be read (${err.code}).`,
          { file, hint: "Check the permissions of capsule's state folder." },
          { cause: err },
        ),
    );
    if (text === undefined) return { state: 'none', file };
    const untrusted = (kind: UntrustedSnapshotKind, problem: string): SnapshotRead => ({
      state: 'untrusted',
      file,
      kind,
      problem,
    });
    const json = parseStrictJson(text);
    const version = json.ok ? (json.value as { schemaVersion?: unknown } | null)?.schemaVersion : undefined;
    if (version === 1)
      return untrusted(
        'unauthenticated',
        `${file} was written by an earlier capsule, before confirmations were authenticated, so it cannot be told from a forgery`,
      );
    const parsed = json.ok ? snapshotSchema.safeParse(json.value) : undefined;
    if (parsed?.success !== true) return untrusted('broken', `${file} is not a confirmed policy snapshot`);
    const { mac, ...body } = parsed.data;
    if (!(await this.verify(path.basename(file), body, mac)))
      return untrusted(
        'forged',
        `${file} was not written by capsule for this project: its MAC does not verify with this user's key (${this.key.file}), so it is a forgery or a copy`,
      );
    const textsMatch = Object.entries(body.profileTexts).every(
      ([f, t]) => body.policy.profiles[f] === profileTextHash(t),
    );
    // Both follow from the MAC (it covers the file name, the root's id); checked anyway.
    if (body.root !== root || body.hash !== policyHash(body.policy) || !textsMatch)
      return untrusted(
        'forged',
        `${file} names another project (${body.root}) or does not match its own hashes`,
      );
    return { state: 'confirmed', file, snapshot: body };
  }

  /**
   * Record `policy` as confirmed. The text of each confirmed profile is kept too: from disk when it
   * still has the confirmed hash, else from the previous (genuine) snapshot.
   */
  async write(projectRoot: string, policy: PolicyView, by: string): Promise<void> {
    const { root, file } = await this.fileFor(projectRoot);
    const previous = await this.load(projectRoot).catch(() => undefined);
    const previousTexts = previous?.state === 'confirmed' ? previous.snapshot.profileTexts : {};
    const onDisk = await readProfileTexts(projectRoot);
    const profileTexts: Record<string, string> = {};
    for (const [f, hash] of Object.entries(policy.profiles)) {
      const text = [onDisk[f], previousTexts[f]].find(
        (t): t is string => t !== undefined && profileTextHash(t) === hash,
      );
      if (text !== undefined) profileTexts[f] = text;
    }
    const snapshot: PolicySnapshot = {
      schemaVersion: 2,
      root,
      hash: policyHash(policy),
      policy,
      profileTexts,
      confirmedAt: new Date().toISOString(),
      by,
    };
    const mac = await this.sign(path.basename(file), snapshot);
    await this.writeRecord(file, `${JSON.stringify({ ...snapshot, mac }, null, 2)}\n`);
  }
}

/**
 * A snapshot that is there and is not a confirmation stops every command that decides anything: the
 * policy the person confirmed is unknown (its deny rules too), and taking the files as they are would
 * hand whoever replaced it the project. Until a person confirms the policy again nothing runs.
 */
export function untrustedSnapshot(read: Extract<SnapshotRead, { state: 'untrusted' }>): CapsuleError {
  return new CapsuleError(
    'CONFIG_INVALID',
    `The confirmed policy of this project is not trusted: ${read.problem}. Nothing is run on it.`,
    {
      file: read.file,
      hint:
        read.kind === 'unauthenticated'
          ? 'Confirm the policy once with this version: run capsule reload in a terminal and review it.'
          : 'Someone or something other than capsule wrote it. Review capsule.json and .capsule/profiles/ (they may have been changed too), then confirm the policy again with capsule reload in a terminal.',
    },
  );
}

/** The policy a session or command starts with, and what on disk is not (yet) confirmed. */
export interface StartingPolicy {
  /** capsule.json to run with: the file's `roots`, the confirmed policy. */
  config: ProjectConfig;
  /** The confirmed view (the engine's baseline). */
  view: PolicyView;
  /** Project profiles that may be loaded (file name → hash): the confirmed ones. */
  profiles: ProfileHashes;
  /** The texts of those profiles, to load instead of the folder (a changed or deleted one as confirmed). */
  profileTexts: Record<string, string>;
  /** What differs on disk from the confirmed policy; undefined when nothing does. */
  pending?: PolicyChange | undefined;
  /** A warning for stderr when something on disk is not adopted. */
  warning?: string | undefined;
}

/**
 * Which policy to start with. No snapshot yet (a fresh checkout, a CI machine): the files as they are
 * — a repository's file can never lift the ceiling anyway — except `engines`, and, when `recordFirstUse`, that state
 * becomes the confirmed one (sessions do this, so what an agent changes in one session is not
 * adopted by the next). A snapshot that differs from disk: the snapshot wins, the difference is
 * reported, and `capsule reload` shows it to a person; what only tightens the policy applies at once.
 * A snapshot capsule did not write (untrusted): CONFIG_INVALID naming it (see untrustedSnapshot).
 */
export async function resolveStartingPolicy(options: {
  projectRoot: string;
  file: string;
  config: ProjectConfig;
  store: PolicySnapshotStore | undefined;
  recordFirstUse: boolean;
}): Promise<StartingPolicy> {
  const texts = await readProfileTexts(options.projectRoot);
  const diskTexts: Record<string, string> = {};
  const profiles: ProfileHashes = {};
  for (const [f, text] of Object.entries(texts)) {
    profiles[f] = text === undefined ? 'unreadable' : profileTextHash(text);
    if (text !== undefined) diskTexts[f] = text;
  }
  const onDisk = policyViewOf(options.config, profiles);
  const asOnDisk = { config: options.config, view: onDisk, profiles, profileTexts: diskTexts };
  const read: SnapshotRead =
    options.store !== undefined ? await options.store.load(options.projectRoot) : { state: 'none', file: '' };
  if (read.state === 'untrusted') throw untrustedSnapshot(read);
  if (read.state === 'none') {
    // Never confirmed: the files as they are, except `engines`. An engine receives every docker call's
    // files and input, and no ceiling limits where a repository's file points them; the person's own
    // engines (CAPSULE_ENGINES, --engine, DOCKER_HOST) need no confirmation.
    const firstUse = withoutEngines(onDisk);
    if (options.recordFirstUse && options.store !== undefined)
      await options.store.write(options.projectRoot, firstUse, 'first use');
    const pending = policyChange(options.file, firstUse, onDisk);
    if (pending === undefined) return asOnDisk;
    return {
      ...asOnDisk,
      config: configWithPolicy(options.config, firstUse),
      view: firstUse,
      pending,
      warning:
        `${options.file} names Docker engines no person confirmed for this project; they are not used ` +
        `(${pending.lines.join('; ')}). Review and confirm them with: capsule reload`,
    };
  }
  const { snapshot } = read;
  if (policyChange(options.file, snapshot.policy, onDisk) === undefined) return asOnDisk;
  const view = tightenOnly(snapshot.policy, onDisk);
  const pending = policyChange(options.file, view, onDisk);
  const config = configWithPolicy(options.config, view);
  // Each confirmed profile as confirmed: the file when it is unchanged, else the recorded text.
  const profileTexts: Record<string, string> = {};
  for (const [f, hash] of Object.entries(view.profiles)) {
    const text = profiles[f] === hash ? diskTexts[f] : snapshot.profileTexts[f];
    if (text !== undefined) profileTexts[f] = text;
  }
  if (pending === undefined) return { config, view, profiles: view.profiles, profileTexts };
  return {
    config,
    view,
    profiles: view.profiles,
    profileTexts,
    pending,
    warning:
      `${options.file} or ${path.join(options.projectRoot, '.capsule', 'profiles')} changed since a person last confirmed the policy; ` +
      `the change is not applied (${pending.lines.length} difference(s)). Review and confirm it with: capsule reload`,
  };
}
