import { createHash } from 'node:crypto';
import { mkdir, readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { writeFileAtomic } from '../config/config-store.js';
import type { ProjectConfig } from '../config/project-config.js';
import { CapsuleError } from '../errors.js';
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

const snapshotSchema = z
  .strictObject({
    schemaVersion: z.literal(1),
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
  })
  .describe('A confirmed policy snapshot, one file per project under the per-user state folder.');

export type PolicySnapshot = z.infer<typeof snapshotSchema>;

/** The last confirmed policy of each project, kept in capsule's per-user state folder. */
export class PolicySnapshotStore {
  readonly dir: string;

  constructor(options: { stateDir: string }) {
    this.dir = path.join(options.stateDir, 'policy');
  }

  /** The snapshot file of a project: keyed by the sha256 of the root's real path. */
  async fileFor(projectRoot: string): Promise<{ root: string; file: string }> {
    const root = await realpath(projectRoot).catch(() => path.resolve(projectRoot));
    const id = createHash('sha256').update(root).digest('hex').slice(0, 32);
    return { root, file: path.join(this.dir, `${id}.json`) };
  }

  async read(projectRoot: string): Promise<PolicySnapshot | undefined> {
    const { root, file } = await this.fileFor(projectRoot);
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new CapsuleError(
        'CONFIG_INVALID',
        `${file} cannot be read (${(err as NodeJS.ErrnoException).code}).`,
        { file, hint: "Check the permissions of capsule's state folder." },
        { cause: err },
      );
    }
    let parsed: PolicySnapshot;
    try {
      parsed = snapshotSchema.parse(JSON.parse(text));
    } catch (err) {
      throw new CapsuleError(
        'CONFIG_INVALID',
        `${file}: the confirmed policy snapshot of ${root} is broken; nothing was adopted.`,
        { file, hint: `Delete ${file} and confirm the policy again with capsule reload.` },
        { cause: err },
      );
    }
    // A snapshot for another root (a copied file) or whose hashes do not match is not a confirmation.
    const textsMatch = Object.entries(parsed.profileTexts).every(
      ([f, text]) => parsed.policy.profiles[f] === profileTextHash(text),
    );
    if (parsed.root !== root || parsed.hash !== policyHash(parsed.policy) || !textsMatch) {
      throw new CapsuleError('CONFIG_INVALID', `${file} does not belong to ${root} or was altered.`, {
        file,
        hint: `Delete ${file} and confirm the policy again with capsule reload.`,
      });
    }
    return parsed;
  }

  /**
   * Record `policy` as confirmed. The text of each confirmed profile is kept too: from disk when it
   * still has the confirmed hash, else from the previous snapshot.
   */
  async write(projectRoot: string, policy: PolicyView, by: string): Promise<void> {
    const { root, file } = await this.fileFor(projectRoot);
    const previous = await this.read(projectRoot).catch(() => undefined);
    const onDisk = await readProfileTexts(projectRoot);
    const profileTexts: Record<string, string> = {};
    for (const [f, hash] of Object.entries(policy.profiles)) {
      const text = [onDisk[f], previous?.profileTexts[f]].find(
        (t): t is string => t !== undefined && profileTextHash(t) === hash,
      );
      if (text !== undefined) profileTexts[f] = text;
    }
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const snapshot: PolicySnapshot = {
      schemaVersion: 1,
      root,
      hash: policyHash(policy),
      policy,
      profileTexts,
      confirmedAt: new Date().toISOString(),
      by,
    };
    await writeFileAtomic(file, `${JSON.stringify(snapshot, null, 2)}\n`, 0o600);
  }
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
  const snapshot = options.store !== undefined ? await options.store.read(options.projectRoot) : undefined;
  if (snapshot === undefined) {
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
