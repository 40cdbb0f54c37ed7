import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { writeFileAtomic } from '../base/atomic-write.js';
import path from 'node:path';
import { z } from 'zod';
import { parseStrictJson } from '../base/strict-json.js';
import type { StateKey } from '../project/state-key.js';
import { hashFiles } from '../manifest/hash.js';

/**
 * A file changed within this long before it was looked at may change again without its stamp moving
 * (timestamps are coarse on some filesystems): such a folder is hashed but not remembered.
 */
const DEFAULT_SETTLE_MS = 2000;

const folderEntrySchema = z
  .strictObject({
    files: z.array(z.string()).describe('The hashed files, in hash order (relative paths).'),
    stamps: z.array(z.string()).describe('size:mtime:ctime:inode:mode of each file, in the same order.'),
    contentHash: z.string().regex(/^sha256:[0-9a-f]{64}$/),
    mac: z
      .string()
      .describe(
        'HMAC-SHA256 with the per-user key (StateKey) of the other fields, for the folder it is keyed by.',
      ),
  })
  .describe('One capability folder: its content hash when every file still has these stamps.');

const scanIndexSchema = z
  .strictObject({
    schemaVersion: z.literal(2),
    folders: z.record(z.string(), folderEntrySchema).describe('Keyed by the real path of the folder.'),
  })
  .describe(
    'What the last registry scans hashed. An optimisation for listing and validation only: nothing runs on its say-so.',
  );

type FolderEntry = z.infer<typeof folderEntrySchema>;

/** Where the index of a registry (a project and its roots) lives in the per-user state folder. */
export function scanIndexPath(userStateDir: string, projectRoot: string, roots: readonly string[]): string {
  const id = createHash('sha256')
    .update([projectRoot, ...roots].join('\0'))
    .digest('hex')
    .slice(0, 32);
  return path.join(userStateDir, 'registry-index', `${id}.json`);
}

export interface ScanIndexOptions {
  /** The per-user key: an entry is used only when its MAC verifies with it. */
  key: StateKey;
  /** Don't remember a folder a file of which changed this recently (default 2 s). */
  settleMs?: number | undefined;
}

const MAC_PURPOSE = 'scan-index';

// ctime is in the stamp because no writer can set it back: any write, chmod or rename moves it.
const stampOf = (st: { size: bigint; mtimeNs: bigint; ctimeNs: bigint; ino: bigint; mode: bigint }): string =>
  `${st.size}:${st.mtimeNs}:${st.ctimeNs}:${st.ino}:${st.mode}`;

/**
 * Content hashes of capability folders keyed by the stamps of their files, so a scan re-reads only
 * what changed since the last one. Kept in capsule's per-user state, outside every project.
 *
 * Trust: none for a run. A scan's contentHash is for listing and validation; `registry.get()` (what
 * the executor and the gate use) always hashes the bytes, and the executor stages the bytes it ran
 * and checks them against that hash. Each entry carries a MAC with the per-user key, so an entry
 * capsule did not write (a changed folder recorded under its old hash) is not used: the folder is
 * hashed afresh. An index that cannot be read costs a re-hash, never a run.
 */
export class ScanIndex {
  readonly file: string;
  readonly #settleMs: number;
  readonly #key: StateKey;
  #usable: boolean | undefined;
  #loaded: Map<string, FolderEntry> | undefined;
  /** Entries found or made by the current scan: what is kept. */
  #next = new Map<string, FolderEntry>();
  #dirty = false;

  constructor(file: string, options: ScanIndexOptions) {
    this.file = file;
    this.#settleMs = options.settleMs ?? DEFAULT_SETTLE_MS;
    this.#key = options.key;
  }

  /** Start a scan: entries not used by it are dropped when it is saved. */
  async begin(): Promise<void> {
    // Without a usable key (a broken key file is reported where it matters) the index is not used.
    this.#usable ??= await this.#key.load().then(
      () => true,
      () => false,
    );
    this.#loaded ??= this.#usable ? await this.#read() : new Map();
    this.#next = new Map();
    this.#dirty = false;
  }

  /**
   * The content hash of `files` of `dir` (as hashFiles computes it): from the index when every file
   * has the stamp recorded, otherwise read and hashed (and remembered once the files have settled).
   */
  async hash(dir: string, files: readonly string[]): Promise<string> {
    const before = Date.now();
    // One stat per file, synchronously: microseconds each, where a round trip through the thread
    // pool costs more than the call (a scan makes thousands).
    const stats = files.map((f) => statSync(path.join(dir, f), { bigint: true }));
    const stamps = stats.map(stampOf);
    const known = this.#loaded?.get(dir);
    if (known !== undefined && sameList(known.files, files) && sameList(known.stamps, stamps)) {
      this.#next.set(dir, known);
      return known.contentHash;
    }
    // Stamps first, bytes after: a write during the read moves a stamp, so it is not hidden next time.
    const contentHash = await hashFiles(dir, files);
    const newest = stats.reduce((m, s) => (s.ctimeNs > m ? s.ctimeNs : m), 0n);
    if (this.#usable === true && Number(newest / 1_000_000n) < before - this.#settleMs) {
      const body = { files: [...files], stamps, contentHash };
      this.#next.set(dir, { ...body, mac: await this.#key.sign(MAC_PURPOSE, dir, body) });
      this.#dirty = true;
    }
    return contentHash;
  }

  /** Keep what this scan used; best effort (a failure to write costs the next scan a re-hash). */
  async save(): Promise<void> {
    const dropped = this.#loaded !== undefined && this.#loaded.size !== this.#next.size;
    this.#loaded = this.#next;
    if ((!this.#dirty && !dropped) || this.#usable !== true) return;
    const doc = { schemaVersion: 2 as const, folders: Object.fromEntries(this.#next) };
    // A reader sees the old index or the new one, never half of one; a failed write only costs speed.
    await mkdir(path.dirname(this.file), { recursive: true, mode: 0o700 })
      .then(() => writeFileAtomic(this.file, JSON.stringify(doc), 0o600))
      .catch(() => undefined);
  }

  async #read(): Promise<Map<string, FolderEntry>> {
    let text: string;
    try {
      text = await readFile(this.file, 'utf8');
    } catch {
      return new Map();
    }
    const json = parseStrictJson(text);
    const parsed = json.ok ? scanIndexSchema.safeParse(json.value) : undefined;
    // Unreadable or not an index (or one of an earlier capsule, without MACs): start over.
    if (parsed?.success !== true) return new Map();
    const entries = new Map<string, FolderEntry>();
    for (const [dir, entry] of Object.entries(parsed.data.folders)) {
      const { mac, ...body } = entry;
      // Not capsule's (another key, or edited): as if absent, so that folder is hashed again.
      if (await this.#key.verify(MAC_PURPOSE, dir, body, mac)) entries.set(dir, entry);
    }
    return entries;
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
