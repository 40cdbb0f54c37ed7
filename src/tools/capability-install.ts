import { randomBytes } from 'node:crypto';
import { chmod, mkdir, realpath, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../errors.js';
import { loadCapability } from '../manifest/load.js';
import { isInside } from '../manifest/paths.js';
import { MANIFEST_FILE } from '../manifest/schema.js';
import type { Environment } from '../manifest/types.js';
import type { AgentToolContext } from './ports.js';
import type { Draft } from './capability-drafts.js';
import { capabilitySummary } from './capability-tools.js';

// The staged install of a draft: one capability folder, built in a hidden folder beside its final
// place, validated by the loader there and renamed into place. Shared by the generate_* tools and
// `capsule new`.

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

async function exists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}

export interface GenerateResult {
  name: string;
  environment: Environment;
  dir: string;
  contentHash: string;
  replaced: boolean;
  sandboxed: boolean;
  isolation: string;
}

/**
 * Write a draft as one capability folder: staged in a hidden folder inside the root, validated by the
 * loader there, and only then renamed into place. A failure leaves nothing visible behind.
 */
export async function installDraft(
  draft: Draft,
  args: { root?: string | undefined; overwrite: boolean },
  ctx: InstallContext,
): Promise<GenerateResult> {
  const root = await chooseRoot(ctx, args.root, true);
  const target = path.join(root, draft.name);
  if (!isInside(root, target) || target === root)
    throw new CapsuleError('PATH_ESCAPE', `name: "${draft.name}" leaves the root.`, { field: 'name' });
  await ctx.workspace.assertWritable(target, 'name', draft.name);
  if (!args.overwrite && (await exists(target))) {
    throw new CapsuleError(
      'ALREADY_EXISTS',
      `A capability folder "${draft.name}" already exists in ${root}; nothing was written.`,
      {
        field: 'name',
        hint: 'Choose another name, or pass overwrite: true to replace it.',
      },
    );
  }
  // Dot-prefixed: the registry skips it, so a half-built capability is never listed.
  const staging = path.join(root, `.capsule-gen-${randomBytes(6).toString('hex')}`);
  const stageDir = path.join(staging, draft.name);
  let replaced = false;
  try {
    await mkdir(stageDir, { recursive: true });
    for (const [rel, content] of draft.files) {
      const file = path.resolve(stageDir, rel);
      if (!isInside(stageDir, file) || file === stageDir) {
        throw new CapsuleError('PATH_ESCAPE', `files.${rel}: leaves the capability folder.`, {
          field: `files.${rel}`,
        });
      }
      // Where the file will end up, not the staging copy: no capsule.json or .capsule/ at any depth.
      await ctx.workspace.assertWritable(
        path.join(target, path.relative(stageDir, file)),
        `files.${rel}`,
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

    if (await exists(target)) {
      if (!args.overwrite) {
        throw new CapsuleError(
          'ALREADY_EXISTS',
          `A capability folder "${draft.name}" appeared in ${root} meanwhile; nothing was written.`,
          {
            field: 'name',
          },
        );
      }
      await rename(target, path.join(staging, `${draft.name}.old`));
      replaced = true;
    }
    try {
      await rename(stageDir, target);
    } catch (err) {
      // Put the old capability back rather than lose it with the staging folder.
      if (replaced) await rename(path.join(staging, `${draft.name}.old`), target).catch(() => undefined);
      throw err;
    }
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
  ctx.progress?.({ message: `stored ${draft.name}`, progress: 3, total: 3 });
  // The registry reads afresh: the new capability is visible without a restart.
  const capability = await ctx.registry.get(draft.name);
  return { ...capabilitySummary(capability, ctx), replaced };
}
