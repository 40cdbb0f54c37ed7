import { randomBytes } from 'node:crypto';
import { fieldPath } from '../base/zod-issues.js';
import { chmod, lstat, mkdir, realpath, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';
import { loadCapability } from '../manifest/load.js';
import { isInside } from '../manifest/paths.js';
import { MANIFEST_FILE } from '../project/environments.js';
import type { Capability, Environment } from '../manifest/types.js';
import type { AgentToolContext } from './ports.js';
import type { Draft } from './capability-drafts.js';
import { capabilitySummary } from './capability-tools.js';

// The staged install of a draft: one capability folder, built in a hidden folder beside its final
// place, validated by the loader there and renamed into place. Shared by the generate_* tools and
// `capsule new`. What an install may touch is decided first, by planInstall (docs/mcp.md, "Generating
// capabilities"): the one folder it names, absent, or a valid capability of that name when overwrite
// was asked — never a name another root holds, a root itself, or a folder that is not a capability.

/** What an install needs: the registry's roots, the workspace's write rules, the builders. */
export type InstallContext = Pick<
  AgentToolContext,
  'registry' | 'workspace' | 'protectedPaths' | 'isolation' | 'componentize' | 'progress' | 'signal'
>;

/** Real path of `p`, or its lexical absolute form while it does not exist yet. */
async function realOrResolved(p: string): Promise<string> {
  return realpath(p).catch(() => path.resolve(p));
}

/**
 * The capability root to write into: one of the registry's roots, never a protected path. With
 * `create`, the root folder is made (only in execute(): permission() has no side effects).
 */
export async function chooseRoot(
  ctx: InstallContext,
  requested: string | undefined,
  create: boolean,
): Promise<string> {
  const roots = await Promise.all(ctx.registry.roots.map(realOrResolved));
  let root: string | undefined;
  if (requested === undefined) root = roots[0];
  else {
    const wanted = await realOrResolved(path.resolve(ctx.workspace.root, requested));
    root = roots.find((r) => r === wanted);
    if (root === undefined) {
      throw new CapsuleError(
        'PATH_ESCAPE',
        `root: "${requested}" is not one of the capability roots (${roots.join(', ')}).`,
        {
          field: 'root',
          hint: 'Capabilities are written only into the configured roots (capsule.json "roots").',
        },
      );
    }
  }
  if (root === undefined) throw new CapsuleError('CONFIG_INVALID', 'No capability root is configured.');
  // Roots come from capsule.json, a repository file: a root of "..", an absolute folder or a symlink out
  // of the project must not let a generator write (or, with overwrite, replace folders) elsewhere.
  await ctx.workspace.resolve(root, 'root');
  // A root may be the project root itself (holding capsule.json): only the folder written counts.
  await ctx.workspace.assertWritable(root, 'root', root, { containing: false });
  if (!create) return root;
  await mkdir(root, { recursive: true });
  const real = await realpath(root);
  await ctx.workspace.resolve(real, 'root');
  await ctx.workspace.assertWritable(real, 'root', real, { containing: false });
  return real;
}

async function lstatOrUndefined(p: string): Promise<Awaited<ReturnType<typeof lstat>> | undefined> {
  try {
    return await lstat(p);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** What an install will do, decided before anything is written (and shown in the prompt). */
export interface InstallPlan {
  name: string;
  /** The capability root written into (real path, or its resolved form while it does not exist). */
  root: string;
  /** `root/name`: the one folder the install touches. */
  target: string;
  /** The capability the install replaces (overwrite, and a valid capability of that name is there). */
  replaces?: { dir: string; contentHash: string } | undefined;
}

const nothingWritten = (what: string, hint?: string, field = 'name'): CapsuleError =>
  new CapsuleError('ALREADY_EXISTS', `${what}; nothing was written.`, { field, hint });

/** Loads the folder at `dir` as the capability `name`, or undefined (with why) when it is not one. */
async function existingCapability(
  dir: string,
  name: string,
  root: string,
  ctx: InstallContext,
): Promise<{ capability: Capability } | { why: string }> {
  const loaded = await loadCapability(dir, {
    root,
    projectRoot: ctx.workspace.root,
    protectedPaths: ctx.protectedPaths,
    capabilityRoots: ctx.registry.roots,
    inputValidator: ctx.registry.inputValidator,
  });
  if (!loaded.ok) {
    const first = loaded.invalid.issues[0];
    return {
      why:
        first === undefined
          ? 'it is invalid'
          : `${first.field ?? path.basename(first.file)}: ${first.message}`,
    };
  }
  if (loaded.capability.name !== name) return { why: `its manifest names "${loaded.capability.name}"` };
  return { capability: loaded.capability };
}

/**
 * Decides what installing `name` touches, writing nothing: the folder `name` in the chosen root, which
 * must be absent — or, with `overwrite`, hold a valid capability of that name (its hash is what the
 * prompt shows and what execute() replaces). Refused: a name any other root holds (the new capability
 * would shadow it, or be shadowed), a name that is a capability root or holds one, and with overwrite a
 * folder that is not a capability (a file, a symlink, source code, an invalid manifest).
 */
export async function planInstall(
  ctx: InstallContext,
  name: string,
  args: { root?: string | undefined; overwrite: boolean },
): Promise<InstallPlan> {
  const root = await chooseRoot(ctx, args.root, false);
  const target = path.join(root, name);
  if (!isInside(root, target) || target === root)
    throw new CapsuleError('PATH_ESCAPE', `name: "${name}" leaves the root.`, { field: 'name' });
  await ctx.workspace.assertWritable(target, 'name', name);
  const roots = await Promise.all(ctx.registry.roots.map(realOrResolved));
  for (const other of roots) {
    if (other === root) continue;
    if (other === target || isInside(target, other)) {
      throw new CapsuleError(
        'PATH_ESCAPE',
        `name: "${name}" in ${root} is (or holds) the capability root ${other}; nothing was written.`,
        { field: 'name', hint: 'Choose another name.' },
      );
    }
    if ((await lstatOrUndefined(path.join(other, name))) !== undefined) {
      throw nothingWritten(
        `"${name}" already exists in another capability root (${path.join(other, name)}): a capability of that name in ${root} would shadow it, or be shadowed by it`,
        'Choose another name. overwrite replaces a capability only in the root it is in.',
      );
    }
  }
  const st = await lstatOrUndefined(target);
  if (st === undefined) return { name, root, target };
  if (!args.overwrite) {
    throw nothingWritten(
      `A capability folder "${name}" already exists in ${root}`,
      'Choose another name, or pass overwrite: true to replace it.',
    );
  }
  if (!st.isDirectory()) {
    throw nothingWritten(
      `"${name}" in ${root} is ${st.isSymbolicLink() ? 'a symlink' : 'not a folder'}, not a capability folder; overwrite replaces only a capability`,
      'Choose another name.',
    );
  }
  const existing = await existingCapability(target, name, root, ctx);
  if ('why' in existing) {
    throw nothingWritten(
      `The folder "${name}" in ${root} is not a valid capability (${existing.why}); overwrite replaces only a capability, never another folder`,
      'Choose another name; a person fixes or removes that folder.',
    );
  }
  return { name, root, target, replaces: { dir: target, contentHash: existing.capability.contentHash } };
}

/** The same plan, or a refusal: what was asked about is the only thing an install may change. */
function assertSamePlan(shown: InstallPlan, now: InstallPlan): void {
  if (shown.target !== now.target || shown.replaces?.contentHash !== now.replaces?.contentHash) {
    const was =
      shown.replaces === undefined ? 'absent' : `the capability with content ${shown.replaces.contentHash}`;
    throw nothingWritten(
      `"${now.name}" in ${now.root} changed since permission was asked (it was ${was})`,
      'Call the tool again: the prompt shows what is there now.',
    );
  }
}

export interface GenerateResult {
  name: string;
  environment: Environment;
  dir: string;
  contentHash: string;
  replaced: boolean;
  /** The content hash of the capability replaced (when replaced). */
  replacedContentHash?: string | undefined;
  sandboxed: boolean;
  isolation: string;
}

/**
 * Write a draft as one capability folder: every check of {@link planInstall} first (when `shown` is
 * given, the plan must still be the one the prompt showed), then staged in a hidden folder inside the
 * root, validated by the loader there, checked again and renamed into place, and looked up through the
 * registry. Any failure, including one after the rename, leaves the root as it was: the new folder
 * removed, a replaced capability put back, a root this call made removed again.
 */
export async function installDraft(
  draft: Draft,
  args: { root?: string | undefined; overwrite: boolean },
  ctx: InstallContext,
  shown?: InstallPlan,
): Promise<GenerateResult> {
  const planned = await planInstall(ctx, draft.name, args);
  if (shown !== undefined) assertSamePlan(shown, planned);
  const madeRoot = (await lstatOrUndefined(planned.root)) === undefined;
  const root = await chooseRoot(ctx, args.root, true);
  const target = path.join(root, draft.name);
  // Dot-prefixed: the registry skips it, so a half-built capability is never listed.
  const staging = path.join(root, `.capsule-gen-${randomBytes(6).toString('hex')}`);
  const stageDir = path.join(staging, draft.name);
  // A replaced capability is moved aside under its own name (the loader checks it there again).
  const old = path.join(staging, 'replaced', draft.name);
  let replaced: InstallPlan['replaces'];
  let installed = false;
  let succeeded = false;
  try {
    await mkdir(stageDir, { recursive: true });
    for (const [rel, content] of draft.files) {
      const file = path.resolve(stageDir, rel);
      if (!isInside(stageDir, file) || file === stageDir) {
        throw new CapsuleError('PATH_ESCAPE', `${fieldPath(['files', rel])}: leaves the capability folder.`, {
          field: `${fieldPath(['files', rel])}`,
        });
      }
      // Where the file will end up, not the staging copy: no capsule.json or .capsule/ at any depth.
      await ctx.workspace.assertWritable(
        path.join(target, path.relative(stageDir, file)),
        `${fieldPath(['files', rel])}`,
        rel,
      );
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, content, { flag: 'wx' });
      if (/\.(sh|py|mjs)$/.test(rel)) await chmod(file, 0o755);
    }
    await writeFile(path.join(stageDir, MANIFEST_FILE), `${JSON.stringify(draft.manifest, null, 2)}\n`, {
      flag: 'wx',
    });
    await draft.build?.(stageDir, ctx);
    if (ctx.signal?.aborted)
      throw new CapsuleError('CANCELED', 'Canceled before the capability was stored; nothing was written.');

    const loaded = await loadCapability(stageDir, {
      root: await realpath(staging),
      projectRoot: ctx.workspace.root,
      protectedPaths: ctx.protectedPaths,
      // The staged copy is checked against the roots it will be installed into.
      capabilityRoots: ctx.registry.roots,
      inputValidator: ctx.registry.inputValidator,
    });
    if (!loaded.ok) {
      const issues = loaded.invalid.issues.map((i) => ({
        field: i.field,
        message: i.message,
        file: path.relative(stageDir, i.file) || draft.name,
      }));
      const first = issues[0];
      throw new CapsuleError(
        'MANIFEST_INVALID',
        `The generated capability is invalid: ${first?.field ?? first?.file ?? ''} ${first?.message ?? ''}; nothing was written.`.trim(),
        { field: first?.field, issues, hint: 'Fix the arguments named above and call the tool again.' },
      );
    }

    // Building takes seconds: the roots are checked again, and must still be what was planned.
    assertSamePlan(planned, await planInstall(ctx, draft.name, args));
    if (planned.replaces !== undefined) {
      await mkdir(path.dirname(old));
      await rename(target, old);
      replaced = planned.replaces;
      // What was moved aside must be what was shown (a change in the moment between check and move).
      const moved = await existingCapability(old, draft.name, path.dirname(old), ctx);
      if ('why' in moved || moved.capability.contentHash !== planned.replaces.contentHash) {
        throw nothingWritten(
          `"${draft.name}" in ${root} changed while it was being replaced`,
          'Call the tool again: the prompt shows what is there now.',
        );
      }
    }
    await rename(stageDir, target);
    installed = true;
    ctx.progress?.({ message: `stored ${draft.name}`, progress: 3, total: 3 });
    // The registry reads afresh: the new capability is visible without a restart, and it must be the
    // one that answers to its name (nothing of that name appeared elsewhere meanwhile).
    const capability = await ctx.registry.get(draft.name);
    if (capability.dir !== (await realpath(target))) {
      throw nothingWritten(`"${draft.name}" resolves to ${capability.dir}, not the folder written`);
    }
    succeeded = true;
    const summary = capabilitySummary(capability, ctx);
    return replaced !== undefined
      ? { ...summary, replaced: true, replacedContentHash: replaced.contentHash }
      : { ...summary, replaced: false };
  } finally {
    if (!succeeded) {
      // Undo in reverse: the new folder out (into staging, removed with it), the old one back.
      if (installed) await rename(target, path.join(staging, 'failed')).catch(() => undefined);
      if (replaced !== undefined) await rename(old, target).catch(() => undefined);
    }
    await rm(staging, { recursive: true, force: true });
    if (!succeeded && madeRoot) await rmdir(root).catch(() => undefined);
  }
}
