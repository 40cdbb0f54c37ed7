import { readFileSync, statSync } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
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

/**
 * Thin loader: reads one capability folder, runs the pure parser, then the checks that need the
 * disk (folder name, entry and grants inside their roots after symlinks, content hash).
 */
export async function loadCapability(folderPath: string, options: LoadOptions): Promise<LoadResult> {
  const folder = path.basename(folderPath);
  const manifestPath = path.join(folderPath, MANIFEST_FILE);
  const fail = (issues: InvalidCapability['issues']): LoadResult => ({
    ok: false,
    invalid: { folder, dir: folderPath, issues },
  });

  let dir: string;
  try {
    dir = await realpath(folderPath);
  } catch (err) {
    return fail([
      {
        file: folderPath,
        message: `disappeared or cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
      },
    ]);
  }
  if (!isInside(options.root, dir) || dir === options.root) {
    return fail([
      { file: folderPath, message: `is a symlink that leaves the capability root ${options.root}` },
    ]);
  }

  let text: string;
  try {
    // Synchronous: a manifest is a few hundred bytes, read in microseconds, and a scan reads
    // thousands — each a round trip through the thread pool otherwise.
    const st = statSync(manifestPath);
    // A FIFO or device would block the read (and with it the process): only a regular file is read.
    if (!st.isFile()) return fail([{ file: manifestPath, message: 'is not a regular file' }]);
    if (st.size > 1024 * 1024) return fail([{ file: manifestPath, message: 'is larger than 1 MiB' }]);
    text = readFileSync(manifestPath, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return fail([
      {
        file: manifestPath,
        message:
          code === 'ENOENT'
            ? `is missing: every capability folder needs a ${MANIFEST_FILE}`
            : `cannot be read (${code ?? 'error'})`,
      },
    ]);
  }

  const parsed = parseManifest(text);
  if (!parsed.ok)
    return fail(parsed.issues.map((i) => ({ file: manifestPath, field: i.field, message: i.message })));
  const manifest = parsed.manifest;
  const issues: InvalidCapability['issues'] = [];

  if (manifest.name !== folder) {
    issues.push({ file: manifestPath, field: 'name', message: `must equal the folder name "${folder}"` });
  }

  const entry = await resolveInside(dir, manifest.entry, dir);
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

  if (manifest.source !== undefined) {
    const source = await resolveInside(dir, manifest.source, dir);
    if (!source.ok)
      issues.push({ file: manifestPath, field: 'source', message: `${manifest.source} ${source.message}` });
  }

  const fsGrants: ResolvedFsGrant[] = [];
  const grantFields: string[] = [];
  for (const [i, grant] of manifest.grants.fs.entries()) {
    const field = `grants.fs[${i}].path`;
    const resolved = await resolveInside(options.projectRoot, grant.path, options.projectRoot);
    if (!resolved.ok) {
      issues.push({ file: manifestPath, field, message: `${grant.path} ${resolved.message}` });
      continue;
    }
    // Every mode: a read-only view of capsule's state still leaks it, and a grant that holds the
    // state (`.`) or lies inside it (`.capsule/cache`) would hand a capability what capsule trusts.
    let hit =
      (await findProtectedState(options.projectRoot, grant.path, { also: options.protectedPaths })) ??
      (await findProtectedState(options.projectRoot, resolved.realPath, { also: options.protectedPaths }));
    if (hit === undefined && (await stat(resolved.realPath)).isDirectory()) {
      // One level down, cheaply (the registry loads on every call): a folder holding a project's
      // capsule.json or .capsule/ is that project's state. Runners that mount look deeper.
      const nested = await findReservedEntry(resolved.realPath, { depth: 1 });
      if (nested.found !== undefined) hit = { protectedPath: nested.found, relation: 'reserved-name' };
    }
    if (hit !== undefined) {
      issues.push({
        file: manifestPath,
        field,
        message: `${grant.path} (mode "${grant.mode}") is refused: ${describeHit(hit)}; grant a folder that neither is nor holds capsule.json, .capsule/ or capsule's cache`,
      });
      continue;
    }
    // rw only: a capability may read code, never write it. Shell capabilities are host code outside
    // any sandbox, so this does not confine them, but refusing costs nothing and keeps one rule for
    // every environment (and a grant is a statement of what the capability may touch).
    if (grant.mode === 'rw') {
      const roots = [options.root, ...(options.capabilityRoots ?? [])];
      const code =
        (await findCapabilityRoot(options.projectRoot, grant.path, roots)) ??
        (await findCapabilityRoot(options.projectRoot, resolved.realPath, roots));
      if (code !== undefined) {
        issues.push({
          file: manifestPath,
          field,
          message: `${grant.path} (mode "rw") is refused: ${describeCapabilityRootHit(code)}, so a run could rewrite a capability's manifest or code. ${CAPABILITY_ROOT_HINT}`,
        });
        continue;
      }
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

  const schemas: Array<['inputSchema' | 'outputSchema', Record<string, unknown> | undefined, string]> = [
    ['inputSchema', manifest.inputSchema, 'input'],
    ['outputSchema', manifest.outputSchema, 'output'],
  ];
  for (const [field, schema, what] of schemas) {
    if (schema === undefined) continue;
    const problem = await options.inputValidator.check(schema, field);
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
