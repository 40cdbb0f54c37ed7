import { lstat, readdir, readlink, realpath } from 'node:fs/promises';
import path from 'node:path';
import { STATE_DIR } from './config-store.js';
import { PROJECT_CONFIG_FILE } from './project-config.js';
import { secretDir } from '../base/user-state.js';
import { CapsuleError } from '../base/errors.js';
import { auditLogPath } from './audit-paths.js';

/**
 * capsule's own state, in one place: what no grant, tool, command cwd or runner mount may reach.
 * Grants come from the human side only, and executable caches are run by capsule itself, so any
 * path that is (or holds) capsule's config, state folder or caches is refused wherever something
 * capsule runs could write, or be given, it.
 */

/** Agent profiles of a project (loaded by the profile catalog). */
export const PROFILES_DIR = path.join(STATE_DIR, 'profiles');

export interface ProtectedPaths {
  /** capsule.json: project allowlist, rules, mode. */
  configFile: string;
  /** `.capsule/`: audit log, locks, profiles; protected as a whole. */
  stateDir: string;
  auditLog: string;
  profilesDir: string;
  locksDir: string;
  /** The per-user cache of transpiled components, when the caller knows it. */
  cacheDir: string | undefined;
  /**
   * The per-user state folder (confirmed policies, audit heads), when the caller knows it: it is
   * outside every project by default, but `CAPSULE_STATE_DIR`/`XDG_STATE_HOME` (or a project at `~`)
   * can put it inside one, and then no grant may reach it either.
   */
  userStateDir: string | undefined;
  /** Every path above, for callers that only need the list. */
  all: string[];
}

/** The protected paths of one project (absolute, not resolved: pass real paths for real answers). */
export function protectedPaths(
  projectRoot: string,
  cacheDir?: string,
  userStateDir?: string,
): ProtectedPaths {
  const root = path.resolve(projectRoot);
  const configFile = path.join(root, PROJECT_CONFIG_FILE);
  const stateDir = path.join(root, STATE_DIR);
  const auditLog = auditLogPath(root);
  const profilesDir = path.join(root, PROFILES_DIR);
  const locksDir = path.join(stateDir, 'locks');
  const cache = cacheDir === undefined ? undefined : path.resolve(cacheDir);
  const all = [configFile, stateDir, auditLog, profilesDir, locksDir];
  if (cache !== undefined) all.push(cache);
  const userState = userStateDir === undefined ? undefined : path.resolve(userStateDir);
  if (userState !== undefined) all.push(userState);
  return {
    configFile,
    stateDir,
    auditLog,
    profilesDir,
    locksDir,
    cacheDir: cache,
    userStateDir: userState,
    all,
  };
}

/**
 * Names capsule reserves at any depth under a project root: `capsule.json` (a nested one makes a
 * project of its folder) and `.capsule` or any `.capsule-…`/`.capsule.…` entry (state folders).
 * Case-insensitive, as on a case-insensitive file system they are the same entry.
 */
export function isReservedName(name: string): boolean {
  // Upper then lower case folds what a case-insensitive file system folds (`ſ` is `s` on macOS).
  const n = name.toUpperCase().toLowerCase();
  return n === PROJECT_CONFIG_FILE || n === STATE_DIR || /^\.capsule[-_.]/.test(n);
}

const escapeRe = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * isReservedName as a regular expression source (flags `iu`: Unicode case folding), for code that cannot import this
 * module (the Wasm worker hides these names inside granted folders).
 */
export const RESERVED_NAME_PATTERN = `^(?:${escapeRe(PROJECT_CONFIG_FILE)}|${escapeRe(STATE_DIR)}|\\.capsule[-_.].*)$`;

/** Why a target is capsule's own state. */
export interface ProtectedHit {
  /** The protected path involved (absolute). */
  protectedPath: string;
  /**
   * `inside`: the target is that path or below it; `contains`: the target is a folder holding it;
   * `reserved-name`: a component of the target below the root is a reserved name.
   */
  relation: 'inside' | 'contains' | 'reserved-name';
}

/** A one-line reason, for error messages. */
export function describeHit(hit: ProtectedHit): string {
  switch (hit.relation) {
    case 'inside':
      return `it is or lies inside ${hit.protectedPath}, which belongs to capsule itself`;
    case 'contains':
      return `it holds ${hit.protectedPath}, which belongs to capsule itself`;
    case 'reserved-name':
      return `${hit.protectedPath} has a name capsule reserves for its own state (capsule.json, .capsule)`;
  }
}

function lower(p: string): string {
  // Case-insensitive: on a case-insensitive file system CAPSULE.JSON is capsule.json.
  return p.toLowerCase();
}

function within(parent: string, child: string): boolean {
  const p = lower(parent);
  const c = lower(child);
  return c === p || c.startsWith(p.endsWith(path.sep) ? p : p + path.sep);
}

export interface ProtectedStateOptions {
  /** More protected paths besides the project's own (e.g. the per-user cache dir). */
  also?: readonly string[] | undefined;
  /**
   * Whether a folder that holds protected state counts (default true: a grant of `.` would give
   * access to capsule.json). False for a working directory, which is not itself a grant.
   */
  containing?: boolean | undefined;
}

/**
 * Pure, lexical core: is `target` (absolute, or relative to `projectRoot`) capsule's own state?
 * True when it is inside (or, unless `containing: false`, contains) one of
 * `protectedPaths(projectRoot)` or `also`, or when any of its components below the root is a
 * reserved name. No disk access: symlinks are the wrapper's job (`findProtectedState`).
 */
export function protectedStateHit(
  projectRoot: string,
  target: string,
  options: ProtectedStateOptions = {},
): ProtectedHit | undefined {
  const root = path.resolve(projectRoot);
  const abs = path.resolve(root, target);
  const paths = [...protectedPaths(root).all, ...(options.also ?? []).map((a) => path.resolve(a))];
  for (const p of paths) if (within(p, abs)) return { protectedPath: p, relation: 'inside' };
  if (options.containing !== false) {
    for (const p of paths) if (within(abs, p)) return { protectedPath: p, relation: 'contains' };
  }
  if (within(root, abs)) {
    const parts = path
      .relative(root, abs)
      .split(path.sep)
      .filter((s) => s !== '');
    for (const [i, part] of parts.entries()) {
      if (isReservedName(part)) {
        return { protectedPath: path.join(root, ...parts.slice(0, i + 1)), relation: 'reserved-name' };
      }
    }
  }
  return undefined;
}

/**
 * Where the protected paths of a project really are: capsule.json, `.capsule/` or a folder in it
 * may itself be a symlink (`capsule.json -> config/capsule.json`), and then the folder it leads to
 * holds capsule's state too.
 */
export async function realProtectedPaths(
  projectRoot: string,
  also: readonly string[] = [],
): Promise<string[]> {
  const rootReal = await realOrSelf(projectRoot);
  const listed = [...protectedPaths(rootReal).all, ...also];
  return [...new Set([...listed, ...(await Promise.all(listed.map(realOrSelf)))])];
}

/**
 * The same question after symlinks: the lexical target, and the target with its deepest existing
 * ancestor resolved, are each checked against the root as given and as its real path, and against
 * the real places of the protected paths. A link that points into `.capsule/` (or at a folder
 * holding capsule.json) is therefore caught too, and so is a folder a symlinked capsule.json leads to.
 */
export async function findProtectedState(
  projectRoot: string,
  target: string,
  options: ProtectedStateOptions = {},
): Promise<ProtectedHit | undefined> {
  const roots = [path.resolve(projectRoot)];
  const rootReal = await realOrSelf(projectRoot);
  if (rootReal !== roots[0]) roots.push(rootReal);
  const withReal = { ...options, also: await realProtectedPaths(projectRoot, options.also ?? []) };
  const abs = path.resolve(projectRoot, target);
  for (const candidate of [abs, await resolveExisting(abs)]) {
    for (const root of roots) {
      const hit = protectedStateHit(root, candidate, withReal);
      if (hit !== undefined) return hit;
    }
  }
  return undefined;
}

/**
 * For tools, right before they write or run somewhere: throws PERMISSION_DENIED naming the target
 * when `findProtectedState` finds capsule's own state.
 */
export async function assertNotProtected(
  projectRoot: string,
  target: string,
  options: ProtectedStateOptions & { field?: string | undefined } = {},
): Promise<void> {
  const hit = await findProtectedState(projectRoot, target, options);
  if (hit === undefined) return;
  throw new CapsuleError(
    'PERMISSION_DENIED',
    `${options.field ?? 'path'}: ${target} is refused: ${describeHit(hit)}.`,
    {
      file: target,
      field: options.field,
      hint: 'capsule.json, .capsule/ (audit log, locks, profiles) and capsule’s caches are changed by a human only (by hand or with the capsule CLI).',
    },
  );
}

/**
 * Capability roots hold capability code: a run that may write one could rewrite its own (or another
 * capability's) manifest and entry, and a `--grant run_capability:X`, which names the capability and
 * not its content, would then cover whatever that run wrote. So no rw grant may be inside or hold a
 * capability root; reading one is harmless. The same question as `findProtectedState` (the lexical
 * target and its real path, against the roots as given and as their real paths).
 */
export async function findCapabilityRoot(
  projectRoot: string,
  target: string,
  capabilityRoots: readonly string[],
): Promise<ProtectedHit | undefined> {
  const given = capabilityRoots.map((r) => path.resolve(projectRoot, r));
  const roots = [...new Set([...given, ...(await Promise.all(given.map(realOrSelf)))])];
  const abs = path.resolve(projectRoot, target);
  for (const candidate of [abs, await resolveExisting(abs)]) {
    for (const r of roots) if (within(r, candidate)) return { protectedPath: r, relation: 'inside' };
    for (const r of roots) if (within(candidate, r)) return { protectedPath: r, relation: 'contains' };
  }
  return undefined;
}

/** A one-line reason for a `findCapabilityRoot` hit, for error messages. */
export function describeCapabilityRootHit(hit: ProtectedHit): string {
  return hit.relation === 'contains'
    ? `it holds the capability root ${hit.protectedPath}, where capability code lives`
    : `it is or lies inside the capability root ${hit.protectedPath}, where capability code lives`;
}

/** What to do instead of an rw grant over capability code. */
export const CAPABILITY_ROOT_HINT =
  'Grant a data folder outside every capability root instead (e.g. "data"), or make this grant "ro".';

/** What `findReservedEntry` saw. */
export interface ReservedScan {
  /** The first entry with a reserved name (absolute), if any. */
  found: string | undefined;
  /** True when the walk stopped at `maxEntries` before seeing everything. */
  exceeded: boolean;
}

/**
 * Walks a folder (never through a symlink) for an entry whose name is reserved: a granted folder
 * holding `x/capsule.json` or `x/.capsule/` holds a project's state, at whatever depth. `depth`
 * limits how far down (default: all the way); `maxEntries` bounds the work (default 50 000).
 */
export async function findReservedEntry(
  dir: string,
  options: { depth?: number; maxEntries?: number } = {},
): Promise<ReservedScan> {
  const maxDepth = options.depth ?? Number.POSITIVE_INFINITY;
  let left = options.maxEntries ?? 50_000;
  const queue: Array<{ dir: string; depth: number }> = [{ dir, depth: 1 }];
  for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
    const entries = await readdir(next.dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (--left < 0) return { found: undefined, exceeded: true };
      const p = path.join(next.dir, e.name);
      if (isReservedName(e.name)) return { found: p, exceeded: false };
      if (e.isDirectory() && next.depth < maxDepth) queue.push({ dir: p, depth: next.depth + 1 });
    }
  }
  return { found: undefined, exceeded: false };
}

/**
 * For runners, right before they mount or copy a capability's fs grants: the loader already refused
 * these, but a runner is handed a Capability by code it does not control, so it asks again.
 * Without a project root, the file system root stands in (reserved names anywhere count).
 */
export async function assertGrantsUnprotected(
  grants: readonly { declared: string; hostPath: string; mode?: 'ro' | 'rw' }[],
  scope: {
    projectRoot?: string | undefined;
    also?: readonly (string | undefined)[];
    /** Capability roots no `rw` grant may be inside or hold (`findCapabilityRoot`). */
    capabilityRoots?: readonly string[];
    file?: string;
    /**
     * Also walk each granted folder for nested state (`x/.capsule/`) and refuse one too large to
     * walk: for a bind mount, which shows the folder's whole tree as it is.
     */
    deep?: boolean;
  },
): Promise<void> {
  const also = (scope.also ?? []).filter((a): a is string => a !== undefined);
  for (const [i, grant] of grants.entries()) {
    const field = `grants.fs[${i}].path`;
    const refuse = (why: string): CapsuleError =>
      new CapsuleError('PERMISSION_DENIED', `${field}: ${grant.declared} is refused: ${why}.`, {
        file: scope.file,
        field,
        hint: 'Grant a folder that neither is nor holds capsule.json, .capsule/ or capsule’s cache.',
      });
    const root = scope.projectRoot ?? path.parse(grant.hostPath).root;
    const hit = await findProtectedState(root, grant.hostPath, { also });
    if (hit !== undefined) throw refuse(describeHit(hit));
    if (grant.mode === 'rw' && scope.capabilityRoots !== undefined) {
      const code = await findCapabilityRoot(root, grant.hostPath, scope.capabilityRoots);
      if (code !== undefined)
        throw new CapsuleError(
          'PERMISSION_DENIED',
          `${field}: ${grant.declared} (mode "rw") is refused: ${describeCapabilityRootHit(code)}.`,
          { file: scope.file, field, hint: CAPABILITY_ROOT_HINT },
        );
    }
    if (scope.deep === true) {
      const st = await lstat(grant.hostPath).catch(() => undefined);
      if (st?.isDirectory() !== true) continue;
      const scan = await findReservedEntry(grant.hostPath);
      if (scan.found !== undefined)
        throw refuse(describeHit({ protectedPath: scan.found, relation: 'reserved-name' }));
      if (scan.exceeded) throw refuse('it holds too many entries to check it for capsule state');
    }
  }
}

/** What a confined host process must not change, or not even read. */
export interface ConfinedPath {
  path: string;
  /**
   * read-only: visible, not writable (bound read-only onto itself); hidden: covered by an empty read-only
   * folder, so a confined host process can neither read nor change what it holds.
   */
  access: 'read-only' | 'hidden';
  what: string;
  /**
   * A folder that must not be created with content by a run: when it does not exist, the confinement makes
   * it (empty) before the run, so it can be bound read-only like one that does.
   */
  makeFolder?: boolean;
}

/** What a confined host process may not change (readOnly) and may not even see (hidden). */
export interface HostProtection {
  readOnly: readonly string[];
  hidden: readonly string[];
  /** Read-only folders above that are made (empty) before a run when they do not exist. */
  madeFolders?: readonly string[];
}

/** The confined paths as the host confinement takes them. */
export function hostProtection(paths: readonly ConfinedPath[]): HostProtection {
  return {
    readOnly: paths.filter((p) => p.access === 'read-only').map((p) => p.path),
    hidden: paths.filter((p) => p.access === 'hidden').map((p) => p.path),
    madeFolders: paths.filter((p) => p.makeFolder === true).map((p) => p.path),
  };
}

/**
 * Claude Code's project folder (`.claude/`: settings with their hooks and permissions, the scripts hooks
 * conventionally run, commands, agents, skills). Claude Code runs what its settings name as the person,
 * unconfined: a confined command that could write here would run its code there later.
 */
export const CLAUDE_DIR = '.claude';

/** The project's `.claude/` as every confined host process sees it: read-only, made empty when missing. */
export function claudeConfinedPath(projectRoot: string): ConfinedPath {
  return {
    path: path.join(path.resolve(projectRoot), CLAUDE_DIR),
    access: 'read-only',
    what: 'Claude Code project settings (.claude/: hooks, permissions, the scripts hooks run)',
    makeFolder: true,
  };
}

/**
 * Host paths a confined host process (a shell capability, run_command, capsule exec) sees read-only —
 * the project's capsule.json and `.capsule/`, the project's Claude Code folder `.claude/` (made empty when
 * missing, so its settings cannot be planted), the per-user cache (code capsule imports) — or not at
 * all: the per-user state (confirmed policies, audit heads) and the folder of the per-user key that
 * authenticates it. Absolute and not resolved: the confinement resolves them and skips the ones that
 * do not exist.
 */
export function confinedPaths(
  projectRoot: string,
  cacheDir: string,
  stateDir?: string | undefined,
): ConfinedPath[] {
  const p = protectedPaths(projectRoot, cacheDir);
  const out: ConfinedPath[] = [
    { path: p.configFile, access: 'read-only', what: 'project config (capsule.json)' },
    { path: p.stateDir, access: 'read-only', what: 'project state (.capsule/: audit log, locks, profiles)' },
    claudeConfinedPath(projectRoot),
    { path: path.resolve(cacheDir), access: 'read-only', what: 'per-user cache (transpiled components)' },
  ];
  if (stateDir !== undefined)
    out.push(
      {
        path: path.resolve(stateDir),
        // Nothing a host command does needs capsule's confirmations or its key: it does not see them.
        access: 'hidden',
        what: 'per-user state (confirmed policies, audit heads)',
      },
      {
        // Inside the folder above (the confinement mounts the outermost), listed on its own so the key
        // stays hidden whatever becomes of the folder's access: whoever reads it can forge a confirmation.
        path: path.resolve(secretDir(stateDir)),
        access: 'hidden',
        what: 'per-user key that authenticates confirmed policies, audit heads and the scan index',
      },
    );
  return out;
}

async function realOrSelf(p: string): Promise<string> {
  return realpath(p).catch(() => path.resolve(p));
}

/** `abs` with its deepest existing ancestor resolved (a dangling link is resolved to its target). */
async function resolveExisting(abs: string, depth = 0): Promise<string> {
  let dir = abs;
  const rest: string[] = [];
  for (;;) {
    try {
      return path.join(await realpath(dir), ...rest);
    } catch {
      const link = await lstat(dir).catch(() => undefined);
      if (link?.isSymbolicLink() && depth < 40) {
        // A dangling symlink: where it would lead decides, not its name.
        const to = path.resolve(path.dirname(dir), await readlink(dir));
        return path.join(await resolveExisting(to, depth + 1), ...rest);
      }
      const parent = path.dirname(dir);
      if (parent === dir) return abs;
      rest.unshift(path.basename(dir));
      dir = parent;
    }
  }
}
