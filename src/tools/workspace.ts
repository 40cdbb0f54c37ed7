import { lstat, realpath } from 'node:fs/promises';
import path from 'node:path';
import { writeFileAtomic } from '../base/atomic-write.js';
import { CapsuleError } from '../base/errors.js';
import { isInside } from '../manifest/paths.js';
import {
  claudeConfinedPath,
  describeHit,
  findProtectedState,
  protectedPaths,
  type HostProtection,
} from '../project/protected-state.js';

/** A path inside the project, resolved: what file tools read and write. */
export interface ResolvedPath {
  /** Absolute path with every existing symlink resolved (inside the project root). */
  real: string;
  /** Path relative to the project root, forward slashes (`.` for the root): the permission subject. */
  relative: string;
  /** Whether something exists there now. */
  exists: boolean;
}

export interface WorkspaceOptions {
  /** Project root (the folder holding capsule.json). Resolved to its real path by `Workspace.open`. */
  projectRoot: string;
  /** Protected paths besides the project's own state (the per-user cache and state dirs). */
  alsoProtected?: readonly string[] | undefined;
  /** Folders no tool may write that a confined host process does not see either (the per-user state). */
  alsoHidden?: readonly string[] | undefined;
}

/**
 * The project root as seen by file tools: every argument is resolved after symlinks and must stay
 * inside the root; writes never reach capsule's own files. One per session, built explicitly.
 */
export class Workspace {
  private constructor(
    readonly root: string,
    private readonly alsoReadOnly: readonly string[],
    private readonly alsoHidden: readonly string[],
  ) {}

  static async open(options: WorkspaceOptions): Promise<Workspace> {
    return new Workspace(
      await realpath(options.projectRoot),
      options.alsoProtected ?? [],
      options.alsoHidden ?? [],
    );
  }

  /** Every extra path no tool may write (read-only and hidden alike). */
  private get alsoProtected(): readonly string[] {
    return [...this.alsoReadOnly, ...this.alsoHidden];
  }

  /**
   * What a confined host process (run_command) may not change: the project's state and the extra paths
   * read-only, the hidden ones (capsule's per-user state) not visible at all.
   */
  get hostProtection(): HostProtection {
    const claude = claudeConfinedPath(this.root).path;
    return {
      readOnly: [...protectedPaths(this.root).all, claude, ...this.alsoReadOnly.map((p) => path.resolve(p))],
      hidden: this.alsoHidden.map((p) => path.resolve(p)),
      madeFolders: [claude],
    };
  }

  /**
   * Resolve a path argument (relative to the root, or absolute inside it). The deepest existing
   * ancestor is resolved with realpath, so a symlink anywhere on the way cannot lead outside.
   */
  async resolve(input: string, field: string): Promise<ResolvedPath> {
    if (input.includes('\0')) throw this.escape(input, field, 'contains a NUL byte');
    const lexical = path.resolve(this.root, input);
    if (!isInside(this.root, lexical))
      throw this.escape(input, field, `is outside the project root ${this.root}`);
    let existing = lexical;
    const rest: string[] = [];
    let exists = true;
    for (;;) {
      try {
        existing = await realpath(existing);
        break;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ENOENT' && code !== 'ENOTDIR')
          throw this.escape(input, field, `cannot be resolved (${code})`);
        // A dangling symlink must not be written through either: it is resolved like any other.
        if (await isSymlink(existing)) {
          throw this.escape(input, field, 'is a symlink whose target does not exist');
        }
        exists = false;
        rest.unshift(path.basename(existing));
        const parent = path.dirname(existing);
        if (parent === existing) throw this.escape(input, field, 'cannot be resolved');
        existing = parent;
      }
    }
    const real = path.join(existing, ...rest);
    if (!isInside(this.root, real)) {
      throw this.escape(input, field, `resolves outside the project root (through a symlink, to ${real})`);
    }
    const relative = path.relative(this.root, real).split(path.sep).join('/') || '.';
    return { real, relative, exists };
  }

  /** Resolve a path that will be written: also refuses capsule's own files. */
  async resolveForWrite(input: string, field: string): Promise<ResolvedPath> {
    const resolved = await this.resolve(input, field);
    await this.assertWritable(resolved.real, field, input);
    return resolved;
  }

  /**
   * Throws PATH_ESCAPE when `absolutePath` (already resolved, as `resolve()` returns it) is
   * capsule's own state: inside or holding capsule.json, `.capsule/` or the cache, or a reserved
   * name at any depth (`sub/capsule.json`, `sub/.capsule/`). `containing: false` for a place that
   * is only worked in (a command's cwd), not written as a whole.
   */
  async assertWritable(
    absolutePath: string,
    field: string,
    shown = absolutePath,
    options: { containing?: boolean } = {},
  ): Promise<void> {
    // Asked afresh each time, after symlinks: where capsule's state really is may have changed.
    const hit = await findProtectedState(this.root, absolutePath, {
      also: this.alsoProtected,
      containing: options.containing,
    });
    if (hit !== undefined) {
      throw new CapsuleError(
        'PATH_ESCAPE',
        `${field}: ${shown} is refused: ${describeHit(hit)}; no tool may write it.`,
        {
          field,
          hint: 'capsule.json, .capsule/ (allowlists, the audit log, profiles) and capsule’s caches are changed only by a human, by hand or with the capsule CLI.',
        },
      );
    }
  }

  /**
   * Write a file atomically (config-store's one writer: a synced temp file in the same folder, then
   * rename, so readers never see half). rename replaces the directory entry itself, so it never writes
   * through a symlink planted there.
   */
  async writeAtomic(target: ResolvedPath, data: string): Promise<void> {
    let mode = 0o644;
    if (target.exists) mode = (await lstat(target.real)).mode & 0o777;
    await writeFileAtomic(target.real, data, mode);
  }

  relativeOf(absolutePath: string): string {
    return path.relative(this.root, absolutePath).split(path.sep).join('/') || '.';
  }

  private escape(input: string, field: string, why: string): CapsuleError {
    return new CapsuleError('PATH_ESCAPE', `${field}: "${input}" ${why}.`, {
      field,
      hint: 'File tools only reach files inside the project root; pass a path relative to it.',
    });
  }
}

async function isSymlink(p: string): Promise<boolean> {
  try {
    return (await lstat(p)).isSymbolicLink();
  } catch {
    return false;
  }
}
