import { closeSync, constants, fstatSync, openSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { parseManifest } from './parse.js';
import {
  CAPABILITY_ROOT_HINT,
  describeCapabilityRootHit,
  describeHit,
  findCapabilityRoot,
  findProtectedState,
  findReservedEntry,
} from '../project/protected-state.js';
import { resolveInside, isInside } from './paths.js';
import { contentFiles, hashFiles, walkFolder } from './hash.js';
import { entryProblem } from './runnable.js';
import { unsatisfiable } from './satisfiable.js';
import { MANIFEST_FILE } from '../project/environments.js';
import type { Capability, InvalidCapability, ResolvedFsGrant } from './types.js';
import type { InputValidator } from './input.js';

export interface LoadOptions {
  /** Real path of the capability root the folder was found under. */
  root: string;
  /** Real path of the project root; fs grants resolve relative to it and must stay inside. */
  projectRoot: string;
  /**
   * Protected paths besides the project's own state (capsule.json and `.capsule/` are always
   * protected): pass `protectedPaths(projectRoot, cacheDir).all` so the per-user cache is too.
   */
  protectedPaths: readonly string[];
  /**
   * Every capability root of the project (the registry's roots), besides `root`, which always
   * counts: no rw grant may be inside or hold one.
   */
  capabilityRoots?: readonly string[] | undefined;
  inputValidator: InputValidator;
  /**
   * How the content hash is computed (default: read and hash every file). A registry scan passes its
   * index here; a load that something will run from never does.
   */
  hashFolder?: ((dir: string, files: readonly string[]) => Promise<string>) | undefined;
}

export type LoadResult = { ok: true; capability: Capability } | { ok: false; invalid: InvalidCapability };

type Issues = InvalidCapability['issues'];
type Manifest = Capability['manifest'];

/**
 * Thin loader: reads one capability folder, runs the pure parser, then the checks that need the
 * disk (folder name, entry and grants inside their roots after symlinks, content hash).
 */
export async function loadCapability(folderPath: string, options: LoadOptions): Promise<LoadResult> {
  const folder = path.basename(folderPath);
  const manifestPath = path.join(folderPath, MANIFEST_FILE);
  const fail = (issues: Issues): LoadResult => ({
    ok: false,
    invalid: { folder, dir: folderPath, issues },
  });

  const read = await readManifest(folderPath, manifestPath, options.root);
  if (!read.ok) return fail(read.issues);
  const { dir, text } = read;

  const parsed = parseManifest(text);
  if (!parsed.ok)
    return fail(parsed.issues.map((i) => ({ file: manifestPath, field: i.field, message: i.message })));
  const manifest = parsed.manifest;
  const issues: Issues = [];

  if (manifest.name !== folder) {
    issues.push({ file: manifestPath, field: 'name', message: `must equal the folder name "${folder}"` });
  }
  const entry = await checkEntry(dir, manifest, manifestPath, issues);
  if (manifest.source !== undefined) {
    const source = resolveInside(dir, manifest.source, dir);
    if (!source.ok)
      issues.push({ file: manifestPath, field: 'source', message: `${manifest.source} ${source.message}` });
  }
  const fsGrants = await resolveFsGrants(manifest, manifestPath, options, issues);
  await checkSchemas(manifest, manifestPath, options.inputValidator, issues);

  const walk = await walkFolder(dir);
  for (const p of walk.problems) issues.push({ file: path.join(dir, p.file), message: p.message });

  if (issues.length > 0 || !entry.ok) return fail(issues);

  let contentHash: string;
  try {
    contentHash = await (options.hashFolder ?? hashFiles)(dir, contentFiles(walk.files, manifest));
  } catch (err) {
    return fail([{ file: dir, message: `cannot be hashed: ${(err as Error).message}` }]);
  }

  return {
    ok: true,
    capability: {
      name: manifest.name,
      environment: manifest.environment,
      manifest,
      dir,
      manifestPath,
      entryPath: entry.realPath,
      contentHash,
      root: options.root,
      fsGrants,
    },
  };
}

/** The folder's real path (inside its capability root) and its manifest's text, or why not. */
async function readManifest(
  folderPath: string,
  manifestPath: string,
  root: string,
): Promise<{ ok: true; dir: string; text: string } | { ok: false; issues: Issues }> {
  let dir: string;
  try {
    dir = realpathSync.native(folderPath);
  } catch (err) {
    return {
      ok: false,
      issues: [
        {
          file: folderPath,
          message: `disappeared or cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
        },
      ],
    };
  }
  if (!isInside(root, dir) || dir === root) {
    return {
      ok: false,
      issues: [{ file: folderPath, message: `is a symlink that leaves the capability root ${root}` }],
    };
  }
  const refuse = (message: string): { ok: false; issues: Issues } => ({
    ok: false,
    issues: [{ file: manifestPath, message }],
  });
  try {
    // Synchronous: a manifest is a few hundred bytes, read in microseconds, and a scan reads
    // thousands — each a round trip through the thread pool otherwise. A FIFO or device would block
    // the read (and with it the process): only a regular file is read, and the file checked is the
    // one read — opened without blocking and checked through its descriptor, so a FIFO swapped in
    // after a check by path cannot hold capsule's thread.
    const fd = openSync(manifestPath, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) return refuse('is not a regular file');
      if (st.size > 1024 * 1024) return refuse('is larger than 1 MiB');
      return { ok: true, dir, text: readFileSync(fd, 'utf8') };
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return refuse(
      code === 'ENOENT'
        ? `is missing: every capability folder needs a ${MANIFEST_FILE}`
        : `cannot be read (${code ?? 'error'})`,
    );
  }
}

/** The entry resolved inside the folder; what is wrong with it goes to `issues`. */
async function checkEntry(
  dir: string,
  manifest: Manifest,
  manifestPath: string,
  issues: Issues,
): Promise<Awaited<ReturnType<typeof resolveInside>>> {
  const entry = resolveInside(dir, manifest.entry, dir);
  if (!entry.ok)
    issues.push({ file: manifestPath, field: 'entry', message: `${manifest.entry} ${entry.message}` });
  else {
    // Gone since it was resolved (a folder being removed during a scan) is an issue, not a crash.
    const st = statSync(entry.realPath, { throwIfNoEntry: false });
    if (st === undefined)
      issues.push({ file: manifestPath, field: 'entry', message: `${manifest.entry} disappeared` });
    else if (!st.isFile())
      issues.push({ file: manifestPath, field: 'entry', message: `${manifest.entry} is not a regular file` });
    else {
      let problem: string | undefined;
      try {
        problem = entryProblem(manifest, entry.realPath, st.mode);
      } catch (err) {
        problem = `${manifest.entry} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`;
      }
      if (problem !== undefined) issues.push({ file: manifestPath, field: 'entry', message: problem });
    }
  }
  return entry;
}

/** The fs grants resolved inside the project; a refused one goes to `issues` instead. */
async function resolveFsGrants(
  manifest: Manifest,
  manifestPath: string,
  options: LoadOptions,
  issues: Issues,
): Promise<ResolvedFsGrant[]> {
  const fsGrants: ResolvedFsGrant[] = [];
  const grantFields: string[] = [];
  for (const [i, grant] of manifest.grants.fs.entries()) {
    const field = `grants.fs[${i}].path`;
    const resolved = resolveInside(options.projectRoot, grant.path, options.projectRoot);
    if (!resolved.ok) {
      issues.push({ file: manifestPath, field, message: `${grant.path} ${resolved.message}` });
      continue;
    }
    const refused = await grantRefusal(grant, resolved.realPath, options);
    if (refused !== undefined) {
      issues.push({ file: manifestPath, field, message: refused });
      continue;
    }
    fsGrants.push({ declared: grant.path, hostPath: resolved.realPath, mode: grant.mode });
    grantFields.push(field);
  }
  // A ro grant inside (or the same folder as) a rw one is not read-only: the rw grant reaches it, and
  // a Wasm guest writes or hard-links its files through that grant. Refused rather than widened.
  for (const [j, inner] of fsGrants.entries()) {
    if (inner.mode !== 'ro') continue;
    const outer = fsGrants.find(
      (g) => g.mode === 'rw' && (g.hostPath === inner.hostPath || isInside(g.hostPath, inner.hostPath)),
    );
    if (outer === undefined) continue;
    issues.push({
      file: manifestPath,
      field: grantFields[j] ?? 'grants.fs',
      message: `${inner.declared} (mode "ro") lies inside the rw grant ${outer.declared}, which can write it: grant it rw, or grant folders that do not hold each other`,
    });
  }
  return fsGrants;
}

/** Why a grant that resolved is refused: it is or holds capsule's state, or (rw) a capability's code. */
async function grantRefusal(
  grant: Manifest['grants']['fs'][number],
  realPath: string,
  options: LoadOptions,
): Promise<string | undefined> {
  // Every mode: a read-only view of capsule's state still leaks it, and a grant that holds the
  // state (`.`) or lies inside it (`.capsule/cache`) would hand a capability what capsule trusts.
  let hit =
    (await findProtectedState(options.projectRoot, grant.path, { also: options.protectedPaths })) ??
    (await findProtectedState(options.projectRoot, realPath, { also: options.protectedPaths }));
  if (hit === undefined && (await stat(realPath)).isDirectory()) {
    // One level down, cheaply (the registry loads on every call): a folder holding a project's
    // capsule.json or .capsule/ is that project's state. Runners that mount look deeper.
    const nested = await findReservedEntry(realPath, { depth: 1 });
    if (nested.found !== undefined) hit = { protectedPath: nested.found, relation: 'reserved-name' };
  }
  if (hit !== undefined) {
    return `${grant.path} (mode "${grant.mode}") is refused: ${describeHit(hit)}; grant a folder that neither is nor holds capsule.json, .capsule/ or capsule's cache`;
  }
  // rw only: a capability may read code, never write it. Shell capabilities are host code outside
  // any sandbox, so this does not confine them, but refusing costs nothing and keeps one rule for
  // every environment (and a grant is a statement of what the capability may touch).
  if (grant.mode === 'rw') {
    const roots = [options.root, ...(options.capabilityRoots ?? [])];
    const code =
      (await findCapabilityRoot(options.projectRoot, grant.path, roots)) ??
      (await findCapabilityRoot(options.projectRoot, realPath, roots));
    if (code !== undefined) {
      return `${grant.path} (mode "rw") is refused: ${describeCapabilityRootHit(code)}, so a run could rewrite a capability's manifest or code. ${CAPABILITY_ROOT_HINT}`;
    }
  }
  return undefined;
}

/** Each schema the manifest declares is a valid JSON Schema that some document satisfies. */
async function checkSchemas(
  manifest: Manifest,
  manifestPath: string,
  validator: InputValidator,
  issues: Issues,
): Promise<void> {
  const schemas: Array<['inputSchema' | 'outputSchema', Record<string, unknown> | undefined, string]> = [
    ['inputSchema', manifest.inputSchema, 'input'],
    ['outputSchema', manifest.outputSchema, 'output'],
  ];
  for (const [field, schema, what] of schemas) {
    if (schema === undefined) continue;
    const problem = await validator.check(schema, field);
    if (problem !== undefined) {
      issues.push({ file: manifestPath, field, message: `is not a valid JSON Schema: ${problem}` });
      continue;
    }
    // A schema nothing satisfies refuses every call (or fails every run): the capability can never run.
    const never = unsatisfiable(schema);
    if (never !== undefined) {
      issues.push({
        file: manifestPath,
        field: never.at === '' ? field : `${field}.${never.at}`,
        message: `no ${what} can satisfy it: ${never.reason}`,
      });
    }
  }
}
