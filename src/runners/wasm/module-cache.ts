import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { CapsuleError } from '../../errors.js';
import { capMemory, detectWasmKind } from './binary.js';
import { webAssembly } from './wasm-types.js';
import type { WasmModule } from './wasm-types.js';

export interface PreparedModule {
  kind: 'module';
  module: WasmModule;
  maxPages: number;
  /** Imports outside wasi_snapshot_preview1 (`module.name`): the runner refuses to start these. */
  foreignImports: string[];
}

export interface PreparedComponent {
  kind: 'component';
  /** URL the worker imports the transpiled JS from (a cache file, or a data: URL without a cache dir). */
  jsUrl: string;
  modules: Record<string, WasmModule>;
  maxPages: number;
  /** WASI interfaces the component imports (versionless), for a fail-closed check before running. */
  imports: string[];
}

export type Prepared = PreparedModule | PreparedComponent;

export interface ModuleCacheOptions {
  /** Directory for transpiled components (e.g. `<projectRoot>/.capsule/cache`); none: memory only. */
  cacheDir?: string | undefined;
  /** Compiled entries kept in memory (least recently used dropped first). */
  maxEntries?: number | undefined;
}

interface TranspiledFiles {
  js: Uint8Array;
  cores: Record<string, Uint8Array>;
  imports: string[];
}

const JS_FILE = 'component.js';
// .mjs on disk: the cache may sit under a package.json without "type": "module".
const JS_DISK_FILE = 'component.mjs';

/**
 * Compiles modules once per (content hash, memory cap): the memory maximum is rewritten before
 * compiling, so a warm call does no parsing and no compile. Components are transpiled by
 * jco-transpile to JS + core modules; that output is kept on disk under `cacheDir/wasm/<sha256>/`
 * (written to a temp dir, then renamed into place) so a new process skips the transpile.
 * V8 cannot persist compiled Wasm code on Node 20, so compiled modules live in memory only.
 */
export class ModuleCache {
  readonly #cacheDir: string | undefined;
  readonly #maxEntries: number;
  readonly #entries = new Map<string, Promise<Prepared>>();
  /** Content hash per byte buffer already seen, so a warm call does not rehash a 1.5 MB component. */
  readonly #hashes = new WeakMap<Uint8Array, string>();
  /** Bytes per file identity (path, inode, size, mtime): a warm call stats the file instead of reading it. */
  readonly #files = new Map<string, { stamp: string; bytes: Uint8Array }>();

  constructor(options: ModuleCacheOptions = {}) {
    this.#cacheDir = options.cacheDir;
    this.#maxEntries = options.maxEntries ?? 64;
    // QuickJS components use extended-const (behind a flag on Node 20's V8); harmless when set twice.
    setFlagsFromString('--experimental-wasm-extended-const');
  }

  get size(): number {
    return this.#entries.size;
  }

  /** Reads a .wasm file, reusing the bytes already read while the file is unchanged. */
  async read(file: string): Promise<Uint8Array> {
    let st;
    try {
      st = await stat(file);
    } catch (err) {
      throw new CapsuleError(
        'NOT_FOUND',
        `cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
        {
          file,
          hint: 'Check the path of the .wasm file.',
        },
      );
    }
    const stamp = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    const known = this.#files.get(file);
    if (known !== undefined && known.stamp === stamp) return known.bytes;
    const bytes = await readFile(file);
    this.#files.set(file, { stamp, bytes });
    if (this.#files.size > this.#maxEntries) {
      const oldest = this.#files.keys().next().value;
      if (oldest !== undefined) this.#files.delete(oldest);
    }
    return bytes;
  }

  async prepare(bytes: Uint8Array, options: { file: string; capPages: number }): Promise<Prepared> {
    let hash = this.#hashes.get(bytes);
    if (hash === undefined) {
      hash = createHash('sha256').update(bytes).digest('hex');
      this.#hashes.set(bytes, hash);
    }
    const key = `${hash}:${options.capPages}`;
    const hit = this.#entries.get(key);
    if (hit !== undefined) {
      this.#entries.delete(key);
      this.#entries.set(key, hit);
      return hit;
    }
    const pending = this.#build(bytes, hash, options);
    this.#entries.set(key, pending);
    pending.catch(() => this.#entries.delete(key));
    while (this.#entries.size > this.#maxEntries) {
      const oldest = this.#entries.keys().next().value;
      if (oldest === undefined) break;
      this.#entries.delete(oldest);
    }
    return pending;
  }

  async #build(
    bytes: Uint8Array,
    hash: string,
    options: { file: string; capPages: number },
  ): Promise<Prepared> {
    const kind = detectWasmKind(bytes, options.file);
    if (kind === 'module') {
      const capped = capMemory(bytes, {
        file: options.file,
        capPages: options.capPages,
        allowMemoryImport: false,
      });
      const module = await compile(capped.bytes, options.file);
      const foreignImports = webAssembly()
        .Module.imports(module)
        .filter((i) => i.module !== 'wasi_snapshot_preview1')
        .map((i) => `${i.module}.${i.name}`);
      return { kind, module, maxPages: capped.maxPages[0] ?? 0, foreignImports };
    }
    const files = await this.#transpiled(bytes, hash, options.file);
    const modules: Record<string, WasmModule> = {};
    let maxPages = 0;
    for (const [name, core] of Object.entries(files.cores)) {
      const capped = capMemory(core, {
        file: `${options.file} (${name})`,
        capPages: options.capPages,
        allowMemoryImport: true,
      });
      maxPages = Math.max(maxPages, ...capped.maxPages);
      modules[name] = await compile(capped.bytes, options.file);
    }
    const jsUrl =
      this.#cacheDir === undefined
        ? `data:text/javascript;base64,${Buffer.from(files.js).toString('base64')}`
        : pathToFileURL(path.join(this.#cacheDir, 'wasm', hash, JS_DISK_FILE)).href;
    return { kind, jsUrl, modules, maxPages, imports: files.imports };
  }

  async #transpiled(bytes: Uint8Array, hash: string, file: string): Promise<TranspiledFiles> {
    const dir = this.#cacheDir === undefined ? undefined : path.join(this.#cacheDir, 'wasm', hash);
    if (dir !== undefined) {
      const cached = await readCached(dir);
      if (cached !== undefined) return cached;
    }
    let result: { files: Record<string, Uint8Array>; imports: string[] };
    try {
      const { transpileBytes } = await import('@bytecodealliance/jco-transpile');
      result = await transpileBytes(bytes, {
        name: 'component',
        instantiation: 'sync',
        noComponentErrorWrapping: true,
        emitTypescriptDeclarations: false,
      });
    } catch (err) {
      throw new CapsuleError(
        'RUNNER_FAILED',
        `${file} is not a valid WebAssembly component: ${String(err)}`,
        {
          file,
          hint: 'Rebuild the component (for JavaScript sources: componentizeJs / scripts/build-wasm-examples.mjs).',
        },
      );
    }
    const js = result.files[JS_FILE];
    if (js === undefined)
      throw new CapsuleError('RUNNER_FAILED', `transpiling ${file} produced no ${JS_FILE}`, { file });
    const cores: Record<string, Uint8Array> = {};
    for (const [name, data] of Object.entries(result.files)) if (name.endsWith('.wasm')) cores[name] = data;
    const imports = result.imports.map((i) => i.replace(/@[^/]*$/, ''));
    const out: TranspiledFiles = { js, cores, imports };
    if (dir !== undefined) await writeCached(dir, out);
    return out;
  }
}

async function compile(bytes: Uint8Array, file: string): Promise<WasmModule> {
  try {
    return await webAssembly().compile(bytes);
  } catch (err) {
    throw new CapsuleError('RUNNER_FAILED', `${file} does not compile: ${(err as Error).message}`, {
      file,
      hint: 'The binary is malformed or uses a Wasm feature Node 20 does not support.',
    });
  }
}

async function readCached(dir: string): Promise<TranspiledFiles | undefined> {
  try {
    const meta = JSON.parse(await readFile(path.join(dir, 'meta.json'), 'utf8')) as { imports: string[] };
    const js = await readFile(path.join(dir, JS_DISK_FILE));
    const cores: Record<string, Uint8Array> = {};
    for (const name of await readdir(dir))
      if (name.endsWith('.wasm')) cores[name] = await readFile(path.join(dir, name));
    return { js, cores, imports: meta.imports };
  } catch {
    return undefined;
  }
}

/** Whole directory written beside its final place, then renamed: readers never see half of it. */
async function writeCached(dir: string, files: TranspiledFiles): Promise<void> {
  const parent = path.dirname(dir);
  await mkdir(parent, { recursive: true });
  const tmp = path.join(parent, `.tmp-${randomBytes(6).toString('hex')}`);
  await mkdir(tmp);
  try {
    await writeFile(path.join(tmp, JS_DISK_FILE), files.js);
    for (const [name, data] of Object.entries(files.cores)) await writeFile(path.join(tmp, name), data);
    await writeFile(path.join(tmp, 'meta.json'), JSON.stringify({ imports: files.imports }));
    await rename(tmp, dir);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    // Another process won the race and wrote the same content: fine.
    if (
      (err as NodeJS.ErrnoException).code === 'ENOTEMPTY' ||
      (err as NodeJS.ErrnoException).code === 'EEXIST'
    )
      return;
    throw err;
  }
}
