import { readdir, realpath } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../errors.js';
import { InputValidator } from '../manifest/input.js';
import { loadCapability } from '../manifest/load.js';
import type { Capability, InvalidCapability } from '../manifest/types.js';

export interface RegistryOptions {
  /** Capability roots (absolute, or relative to projectRoot). Each holds one folder per capability. */
  roots: readonly string[];
  /** Project root: fs grants resolve inside it. */
  projectRoot: string;
  /** Paths no capability may be granted write access to (capsule.json, audit log, profiles). */
  protectedPaths?: readonly string[];
  inputValidator?: InputValidator;
}

export interface ScanResult {
  capabilities: Capability[];
  invalid: InvalidCapability[];
  /** Roots that do not exist or cannot be read (reported, not fatal). */
  missingRoots: string[];
}

/**
 * Finds capabilities under its roots. `scan()` reads everything afresh (a server calls it on
 * `reload`); one bad folder never stops the scan: it is reported in `invalid` with file/field/reason.
 */
export class Registry {
  readonly inputValidator: InputValidator;
  private readonly options: RegistryOptions;
  private last: ScanResult | undefined;

  constructor(options: RegistryOptions) {
    this.options = options;
    this.inputValidator = options.inputValidator ?? new InputValidator();
  }

  get roots(): string[] {
    return this.options.roots.map((r) => path.resolve(this.options.projectRoot, r));
  }

  async scan(): Promise<ScanResult> {
    const projectRoot = await realpath(this.options.projectRoot);
    const protectedPaths = this.options.protectedPaths ?? [];
    const result: ScanResult = { capabilities: [], invalid: [], missingRoots: [] };
    const seen = new Map<string, string>();

    for (const rootPath of this.roots) {
      let root: string;
      let entries;
      try {
        root = await realpath(rootPath);
        entries = await readdir(root, { withFileTypes: true });
      } catch {
        result.missingRoots.push(rootPath);
        continue;
      }
      entries.sort((a, b) => a.name.localeCompare(b.name));
      for (const entry of entries) {
        if (entry.name.startsWith('.')) continue;
        if (!entry.isDirectory() && !entry.isSymbolicLink()) continue;
        const loaded = await loadCapability(path.join(root, entry.name), {
          root,
          projectRoot,
          protectedPaths,
          inputValidator: this.inputValidator,
        });
        if (!loaded.ok) {
          // A symlink to a file (not a folder) is simply not a capability folder.
          if (entry.isSymbolicLink() && loaded.invalid.issues.some((i) => i.message.includes('ENOTDIR')))
            continue;
          result.invalid.push(loaded.invalid);
          continue;
        }
        const cap = loaded.capability;
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
    this.last = result;
    return result;
  }

  /** The last scan, or a fresh one. */
  async current(): Promise<ScanResult> {
    return this.last ?? this.scan();
  }

  /** Resolve one capability by name, from a fresh scan (the manifest is read at run time). */
  async get(name: string): Promise<Capability> {
    const { capabilities, invalid } = await this.scan();
    const found = capabilities.find((c) => c.name === name);
    if (found !== undefined) return found;
    const broken = invalid.find((i) => i.folder === name);
    if (broken !== undefined) {
      const first = broken.issues[0];
      throw new CapsuleError(
        'MANIFEST_INVALID',
        `Capability "${name}" is invalid: ${first ? `${first.file}${first.field ? ` (${first.field})` : ''}: ${first.message}` : 'see capsule validate'}`,
        {
          file: first?.file,
          field: first?.field,
          issues: broken.issues,
          hint: `Run "capsule validate" for every problem.`,
        },
      );
    }
    throw new CapsuleError('NOT_FOUND', `No capability named "${name}" in ${this.roots.join(', ')}.`, {
      hint: 'Run "capsule list" to see what exists.',
    });
  }
}
