import { randomBytes } from 'node:crypto';
import { lstatSync } from 'node:fs';
import { chmod, lstat, mkdir, mkdtemp, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';
import { contentFiles, snapshotFiles, walkFolder } from '../manifest/hash.js';
import type { Capability } from '../manifest/types.js';

export interface CapabilityStageOptions {
  /** Where the stage folder is created. Default: the OS temporary directory (outside every project root). */
  parent?: string | undefined;
}

interface StagedCopy {
  dir: string;
  /** File identities right after staging: a reuse first checks nothing was changed underneath. */
  stamps: Array<{ file: string; stamp: string }>;
}

// ctime is in the stamp because no caller can set it back: any write or chmod moves it.
const stampOf = (st: { size: number; mtimeMs: number; ctimeMs: number; ino: number; mode: number }): string =>
  `${st.size}:${st.mtimeMs}:${st.ctimeMs}:${st.ino}:${st.mode}`;

/**
 * The approved bytes of capabilities, copied out of reach of what runs. A capability's hashed files are
 * read once, hashed from the bytes read, and written read-only into `<stage>/<hash>/`; the runner is
 * given that copy. The stage lives outside every project root (no manifest grant can name it, the file
 * tools cannot reach it), is created 0711 with a random name, and is removed on close(). One copy per
 * content hash is kept for the life of the stage, so repeated calls of the same capability do not copy.
 */
export class CapabilityStage {
  readonly #parent: string;
  #root: Promise<string> | undefined;
  readonly #copies = new Map<string, Promise<StagedCopy>>();
  #closed = false;

  constructor(options: CapabilityStageOptions = {}) {
    this.#parent = options.parent ?? tmpdir();
  }

  /**
   * A copy of `capability` whose `dir` and `entryPath` point at its staged files. The bytes staged are
   * exactly those hashed to `capability.contentHash`; when the folder no longer hashes to it (it changed
   * since it was loaded), this throws MANIFEST_INVALID and nothing is staged.
   */
  async stage(capability: Capability): Promise<Capability> {
    if (this.#closed) throw new CapsuleError('RUNNER_UNAVAILABLE', 'this session was closed');
    const hex = capability.contentHash.replace(/^sha256:/, '');
    if (!/^[0-9a-f]{64}$/.test(hex)) {
      throw new CapsuleError('MANIFEST_INVALID', `${capability.name} has no content hash to stage by.`);
    }
    let copy = this.#copies.get(hex);
    if (copy !== undefined && !(await this.#intact(await copy.catch(() => undefined)))) {
      this.#copies.delete(hex);
      copy = undefined;
    }
    if (copy === undefined) {
      copy = this.#copy(capability, hex);
      this.#copies.set(hex, copy);
      copy.catch(() => this.#copies.delete(hex));
    }
    const { dir } = await copy;
    return {
      ...capability,
      dir,
      // The copy holds every hashed file at its listed path (a symlink as the file it points to), so the
      // entry is found by the path the manifest gives, not by where a link led in the original folder.
      entryPath: path.join(dir, path.posix.normalize(capability.manifest.entry)),
      // manifestPath stays the file the person edits: runners only name it in messages.
    };
  }

  /** Remove every staged copy. Safe to call twice. */
  async close(): Promise<void> {
    this.#closed = true;
    const root = this.#root;
    this.#root = undefined;
    this.#copies.clear();
    if (root === undefined) return;
    const dir = await root.catch(() => undefined);
    if (dir === undefined) return;
    // Copies are read-only folders: make them writable again so an unprivileged owner can remove them.
    await makeWritable(dir).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }

  #stageRoot(): Promise<string> {
    this.#root ??= (async () => {
      const dir = await mkdtemp(path.join(this.#parent, 'capsule-stage-'));
      // Traversable but not listable: a docker sandbox user must reach its bind-mounted copy.
      await chmod(dir, 0o711);
      return dir;
    })();
    return this.#root;
  }

  async #copy(capability: Capability, hex: string): Promise<StagedCopy> {
    const walk = await walkFolder(capability.dir);
    const problem = walk.problems[0];
    const snapshot =
      problem === undefined
        ? await snapshotFiles(capability.dir, contentFiles(walk.files, capability.manifest)).catch(
            (err: unknown) => err as Error,
          )
        : new Error(`${problem.file} ${problem.message}`);
    if (snapshot instanceof Error || snapshot.contentHash !== capability.contentHash) {
      throw new CapsuleError(
        'MANIFEST_INVALID',
        `${capability.name} changed while capsule was copying it to run (${capability.dir}): nothing ran.`,
        {
          file: capability.manifestPath,
          hint: 'Run it again once the folder is no longer being written.',
        },
        snapshot instanceof Error ? { cause: snapshot } : undefined,
      );
    }
    const root = await this.#stageRoot();
    const target = path.join(root, hex);
    const temp = path.join(root, `.${hex.slice(0, 16)}-${randomBytes(6).toString('hex')}`);
    await mkdir(temp, { mode: 0o700 });
    try {
      const dirs = new Set<string>();
      for (const file of snapshot.files) {
        const abs = path.join(temp, file.path);
        const parent = path.dirname(abs);
        if (!dirs.has(parent)) {
          await mkdir(parent, { recursive: true, mode: 0o700 });
          dirs.add(parent);
        }
        await writeFile(abs, file.bytes, { flag: 'wx', mode: file.executable ? 0o555 : 0o444 });
      }
      // Read-only folders, deepest first, then the copy itself; a rename moves it into place whole.
      for (const dir of [...dirs].sort((a, b) => b.length - a.length)) await chmod(dir, 0o555);
      await chmod(temp, 0o555);
      await makeWritable(target).catch(() => undefined);
      await rm(target, { recursive: true, force: true });
      await rename(temp, target);
    } catch (err) {
      await makeWritable(temp).catch(() => undefined);
      await rm(temp, { recursive: true, force: true });
      throw err;
    }
    const stamps: StagedCopy['stamps'] = [];
    for (const file of snapshot.files) {
      const abs = path.join(target, file.path);
      stamps.push({ file: abs, stamp: stampOf(await lstat(abs)) });
    }
    return { dir: target, stamps };
  }

  async #intact(copy: StagedCopy | undefined): Promise<boolean> {
    if (copy === undefined) return false;
    try {
      for (const { file, stamp } of copy.stamps) {
        // Synchronous: one cached lookup per file, on every call of a staged capability.
        const st = lstatSync(file);
        if (!st.isFile() || stampOf(st) !== stamp) return false;
      }
      return true;
    } catch {
      return false;
    }
  }
}

/** Folders of a copy made read-only, writable by their owner again (so it can remove them). */
export async function makeWritable(dir: string): Promise<void> {
  await chmod(dir, 0o700);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await makeWritable(path.join(dir, entry.name));
  }
}
