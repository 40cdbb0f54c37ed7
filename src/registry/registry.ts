import { lstatSync, realpathSync } from 'node:fs';
import { readdir, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';
import { InputValidator } from '../manifest/input.js';
import { loadCapability } from '../manifest/load.js';
import { CAPABILITY_NAME } from '../project/key-syntax.js';
import type { Capability, InvalidCapability } from '../manifest/types.js';
import type { ScanIndex } from './scan-index.js';

/** Folders loaded at once (each load is a chain of small file operations). */
const SCAN_CONCURRENCY = 32;

/** Map with at most `limit` promises in flight; results in input order. */
async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

export interface RegistryOptions {
  /** Capability roots (absolute, or relative to projectRoot). Each holds one folder per capability. */
  roots: readonly string[];
  /** Project root: fs grants resolve inside it. */
  projectRoot: string;
  /** Paths no capability may be granted write access to (capsule.json, audit log, profiles). */
  protectedPaths?: readonly string[];
  inputValidator?: InputValidator;
  /**
   * Hashes of the last scans (per-user state): scan() re-reads only folders whose files changed.
   * get() never uses it.
   */
  index?: ScanIndex | undefined;
}

export interface ScanResult {
  capabilities: Capability[];
  invalid: InvalidCapability[];
  /** Roots that do not exist or cannot be read (reported, not fatal). */
  missingRoots: string[];
}

/**
 * Finds capabilities under its roots. `scan()` reads every manifest afresh (a server calls it on
 * `reload`); one bad folder never stops the scan: it is reported in `invalid` with file/field/reason.
 * With an index, scan() takes a folder's content hash from it while its files are unchanged: scan
 * results are for listing and validation. `get()` — what the executor resolves a run with — always
 * hashes the bytes on disk.
 */
export class Registry {
  readonly inputValidator: InputValidator;
  private readonly options: RegistryOptions;
  private last: ScanResult | undefined;
  /** Scans one at a time: they share the index. */
  private scanning: Promise<unknown> = Promise.resolve();

  constructor(options: RegistryOptions) {
    this.options = options;
    this.inputValidator = options.inputValidator ?? new InputValidator();
  }

  get roots(): string[] {
    return this.options.roots.map((r) => path.resolve(this.options.projectRoot, r));
  }

  scan(): Promise<ScanResult> {
    const run = this.scanning.then(() => this.scanNow());
    this.scanning = run.catch(() => undefined);
    return run;
  }

  private async scanNow(): Promise<ScanResult> {
    const projectRoot = await realpath(this.options.projectRoot);
    const protectedPaths = this.options.protectedPaths ?? [];
    const index = this.options.index;
    await index?.begin();
    const hashFolder = index !== undefined ? index.hash.bind(index) : undefined;
    const result: ScanResult = { capabilities: [], invalid: [], missingRoots: [] };
    const seen = new Map<string, string>();

    // Roots are read concurrently, then recorded in root order so results (and duplicates) are stable.
    const perRoot = await Promise.all(
      this.roots.map(async (rootPath) => {
        let root: string;
        let entries;
        try {
          root = await realpath(rootPath);
          entries = await readdir(root, { withFileTypes: true });
        } catch (err) {
          // A root that is not there is reported as missing; one that is there but cannot be read is
          // an error (never "no capabilities").
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
          throw new CapsuleError(
            'CONFIG_INVALID',
            `The capability root ${rootPath} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'}).`,
            { file: rootPath, hint: 'Make it a readable folder, or remove it from "roots" in capsule.json.' },
            { cause: err },
          );
        }
        entries.sort((a, b) => a.name.localeCompare(b.name));
        const candidates = entries.filter(
          (e) => !e.name.startsWith('.') && (e.isDirectory() || e.isSymbolicLink()),
        );
        // A symlink to a file (not a folder) is simply not a capability folder; a dangling one is
        // loaded, and reported invalid.
        const folders: typeof candidates = [];
        for (const e of candidates) {
          if (e.isSymbolicLink() && (await isFileBehindLink(path.join(root, e.name)))) continue;
          folders.push(e);
        }
        const loaded = await mapLimit(folders, SCAN_CONCURRENCY, (entry) =>
          loadCapability(path.join(root, entry.name), {
            root,
            projectRoot,
            protectedPaths,
            capabilityRoots: this.roots,
            inputValidator: this.inputValidator,
            hashFolder,
          }),
        );
        return { folders, loaded };
      }),
    );
    for (const [r, rootPath] of this.roots.entries()) {
      const scanned = perRoot[r];
      if (scanned === undefined) {
        result.missingRoots.push(rootPath);
        continue;
      }
      const { folders, loaded } = scanned;
      for (const [i, entry] of folders.entries()) {
        const one = loaded[i] as Awaited<ReturnType<typeof loadCapability>>;
        if (!one.ok) {
          result.invalid.push(one.invalid);
          continue;
        }
        const cap = one.capability;
        const previous = seen.get(cap.name);
        if (previous !== undefined) {
          result.invalid.push({
            folder: entry.name,
            dir: cap.dir,
            issues: [
              {
                file: cap.manifestPath,
                field: 'name',
                message: `duplicates the capability already found at ${previous}`,
              },
            ],
          });
          continue;
        }
        seen.set(cap.name, cap.dir);
        result.capabilities.push(cap);
      }
    }
    await index?.save();
    this.last = result;
    return result;
  }

  /**
   * Load a capability folder that is not (yet) under a root — a candidate `capsule learn` proves before it
   * writes it — by exactly the rules of this project's roots: its grants are judged as if it were one of them.
   */
  async loadCandidate(folder: string): Promise<Awaited<ReturnType<typeof loadCapability>>> {
    return loadCapability(folder, {
      root: await realpath(path.dirname(folder)),
      projectRoot: await realpath(this.options.projectRoot),
      protectedPaths: this.options.protectedPaths ?? [],
      capabilityRoots: this.roots,
      inputValidator: this.inputValidator,
    });
  }

  /** The last scan, or a fresh one. */
  async current(): Promise<ScanResult> {
    return this.last ?? this.scan();
  }

  /**
   * Resolve one capability by name, reading its folder afresh (the manifest is read at run time).
   * Only the folder named `name` in each root is loaded, so a lookup costs one capability, not a scan.
   */
  async get(name: string): Promise<Capability> {
    if (!CAPABILITY_NAME.test(name)) {
      throw new CapsuleError('NOT_FOUND', `"${name.slice(0, 80)}" is not a capability name.`, {
        hint: 'Names are 1-64 chars of a-z, 0-9, "-" and "_". Run "capsule list" to see what exists.',
      });
    }
    // Synchronous lookups (cached, microseconds): a call resolves its capability afresh every time.
    const projectRoot = realpathSync.native(this.options.projectRoot);
    const found: Capability[] = [];
    for (const rootPath of this.roots) {
      let root: string;
      try {
        root = realpathSync.native(rootPath);
        lstatSync(path.join(root, name));
      } catch {
        continue;
      }
      const loaded = await loadCapability(path.join(root, name), {
        root,
        projectRoot,
        protectedPaths: this.options.protectedPaths ?? [],
        capabilityRoots: this.roots,
        inputValidator: this.inputValidator,
      });
      if (!loaded.ok) {
        const first = loaded.invalid.issues[0];
        throw new CapsuleError(
          'MANIFEST_INVALID',
          `Capability "${name}" is invalid: ${first ? `${first.file}${first.field ? ` (${first.field})` : ''}: ${first.message}` : 'see capsule validate'}`,
          {
            file: first?.file,
            field: first?.field,
            issues: loaded.invalid.issues,
            hint: `Run "capsule validate" for every problem.`,
          },
        );
      }
      found.push(loaded.capability);
    }
    const [first, second] = found;
    if (first === undefined) {
      throw new CapsuleError('NOT_FOUND', `No capability named "${name}" in ${this.roots.join(', ')}.`, {
        hint: 'Run "capsule list" to see what exists.',
      });
    }
    if (second !== undefined) {
      throw new CapsuleError(
        'MANIFEST_INVALID',
        `Capability "${name}" exists in two roots: ${first.dir} and ${second.dir}.`,
        {
          file: second.manifestPath,
          field: 'name',
          hint: 'Rename or remove one of them.',
        },
      );
    }
    return first;
  }
}

async function isFileBehindLink(link: string): Promise<boolean> {
  try {
    return !(await stat(link)).isDirectory();
  } catch {
    return false; // dangling: loaded, and reported invalid with its reason
  }
}
