import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { z } from 'zod';
import { CapsuleError } from '../../base/errors.js';
import { capMemory, detectWasmKind, memoryFromHost } from './binary.js';
import { HOST_MEMORY_IMPORT, type HostMemory } from './protocol.js';
import { webAssembly } from './wasm-types.js';
import type { WasmModule } from './wasm-types.js';

export interface PreparedModule {
  kind: 'module';
  /** Names this compiled code (content hash and memory cap), so a worker can keep it between calls. */
  key: string;
  module: WasmModule;
  /** Set when the module's memory is supplied by the worker (see memoryFromHost). */
  memory: HostMemory | undefined;
  maxPages: number;
  /** Imports outside wasi_snapshot_preview1 (`module.name`): the runner refuses to start these. */
  foreignImports: string[];
}

export interface PreparedComponent {
  kind: 'component';
  /** Names this code (transpiler, content hash and memory cap), so a worker can keep it between calls. */
  key: string;
  /**
   * data: URL of the transpiled JS the worker imports: the bytes themselves, verified (or just
   * produced) in this process, so nothing on disk can change them between the check and the import.
   */
  jsUrl: string;
  modules: Record<string, WasmModule>;
  /** By module name, for the modules whose memory the worker supplies (see memoryFromHost). */
  memories: Record<string, HostMemory>;
  maxPages: number;
  /** WASI interfaces the component imports (versionless), for a fail-closed check before running. */
  imports: string[];
}

export type Prepared = PreparedModule | PreparedComponent;

export interface ModuleCacheOptions {
  /**
   * capsule's per-user cache folder (`userCacheDir(env)`); components go to `<cacheDir>/wasm/`.
   * Never a folder inside a project (a capability could be granted it). None: memory only.
   */
  cacheDir?: string | undefined;
  /** Compiled entries kept in memory (least recently used dropped first). */
  maxEntries?: number | undefined;
  /** Version of the transpiler, part of every cache key (default: the installed jco-transpile's). */
  transpilerVersion?: string | undefined;
}

/** Bumped when the layout or the transpile options change: older entries are then simply misses. */
const CACHE_FORMAT = 2;
const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/);

/** `<entry>/meta.json`: what was written, so every read can be checked byte for byte. */
const cacheMetaSchema = z.strictObject({
  format: z.literal(CACHE_FORMAT),
  /** sha256 of the component the entry was transpiled from. */
  component: sha256Hex,
  /** The transpiler (`@bytecodealliance/jco-transpile@<version>`) that produced it. */
  transpiler: z.string().min(1),
  imports: z.array(z.string()),
  /** sha256 per file of the entry (the JS and every core module). */
  files: z.record(z.string().regex(/^[A-Za-z0-9._-]+$/), sha256Hex),
});

interface TranspiledFiles {
  js: Uint8Array;
  cores: Record<string, Uint8Array>;
  imports: string[];
}

const JS_FILE = 'component.js';
// The JS as stored on disk (it is imported from its checked bytes, never from this file).
const JS_DISK_FILE = 'component.mjs';

/**
 * Compiles modules once per (content hash, memory cap): the memory maximum is rewritten before
 * compiling, so a warm call does no parsing and no compile. Components are transpiled by
 * jco-transpile to JS + core modules; that output is kept on disk under
 * `cacheDir/wasm/<transpiler version>/<component sha256>/` (written to a temp dir, then renamed
 * into place) so a new process skips the transpile. The cache is not trusted input: every read is
 * checked against the digests recorded when it was written, and anything that does not match
 * (or is missing, or extra) is a miss, transpiled again. The JS is imported from the checked
 * bytes, never from the file. V8 cannot persist compiled Wasm code on Node 20, so compiled modules
 * live in memory only.
 */
export class ModuleCache {
  readonly #cacheDir: string | undefined;
  #transpiler: string | undefined;
  readonly #maxEntries: number;
  readonly #entries = new Map<string, Promise<Prepared>>();
  /** Preloads still reading the disk cache, by entry key (see preload). */
  readonly #preloads = new Map<string, Promise<void>>();
  /** Content hash per byte buffer already seen, so a warm call does not rehash a 1.5 MB component. */
  readonly #hashes = new WeakMap<Uint8Array, string>();
  /** Bytes per file identity (path, inode, size, mtime): a warm call stats the file instead of reading it. */
  readonly #files = new Map<string, { stamp: string; bytes: Uint8Array }>();

  constructor(options: ModuleCacheOptions = {}) {
    this.#cacheDir = options.cacheDir;
    this.#maxEntries = options.maxEntries ?? 64;
    if (options.transpilerVersion !== undefined)
      this.#transpiler = `@bytecodealliance/jco-transpile@${options.transpilerVersion}`;
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
      // Synchronous: one cached lookup on every warm call, cheaper than a trip through the thread pool.
      st = statSync(file);
    } catch (err) {
      throw new CapsuleError(
        'NOT_FOUND',
        `cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
        {
          file,
          hint: 'Check the path of the .wasm file.',
        },
        { cause: err },
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
    const hash = this.#hashOf(bytes);
    const key = `${hash}:${options.capPages}`;
    // A preload still reading the disk cache: wait for it rather than do its work twice.
    await this.#preloads.get(key)?.catch(() => undefined);
    const hit = this.#entries.get(key);
    if (hit !== undefined) {
      this.#entries.delete(key);
      this.#entries.set(key, hit);
      return hit;
    }
    const pending = this.#build(bytes, hash, options);
    this.#remember(key, pending);
    return pending;
  }

  /**
   * Starts preparing `bytes` ahead of its run when that needs no transpile: a module, or a component
   * whose transpiled files the disk cache holds (checked as every read is). A later prepare() of the
   * same bytes and cap gets this work. Runs no code of it and writes nothing: a component not in the
   * cache (or a damaged entry) is left to prepare(), which transpiles it, or reports why not.
   */
  async preload(bytes: Uint8Array, options: { file: string; capPages: number }): Promise<void> {
    const hash = this.#hashOf(bytes);
    const key = `${hash}:${options.capPages}`;
    if (this.#entries.has(key) || this.#preloads.has(key)) return;
    const work = this.#preloadWork(bytes, hash, key, options);
    this.#preloads.set(key, work);
    try {
      await work;
    } finally {
      this.#preloads.delete(key);
    }
  }

  async #preloadWork(
    bytes: Uint8Array,
    hash: string,
    key: string,
    options: { file: string; capPages: number },
  ): Promise<void> {
    let files: TranspiledFiles | undefined;
    if (detectWasmKind(bytes, options.file) === 'component') {
      const dir = this.#entryDir(hash);
      if (dir === undefined) return;
      const cached = await readCached(dir, { component: hash, transpiler: this.#transpilerId() });
      if (!cached.ok) return;
      files = cached.files;
    }
    if (this.#entries.has(key)) return;
    this.#remember(key, this.#build(bytes, hash, options, files));
  }

  #hashOf(bytes: Uint8Array): string {
    let hash = this.#hashes.get(bytes);
    if (hash === undefined) {
      hash = createHash('sha256').update(bytes).digest('hex');
      this.#hashes.set(bytes, hash);
    }
    return hash;
  }

  #remember(key: string, pending: Promise<Prepared>): void {
    this.#entries.set(key, pending);
    pending.catch(() => {
      if (this.#entries.get(key) === pending) this.#entries.delete(key);
    });
    while (this.#entries.size > this.#maxEntries) {
      const oldest = this.#entries.keys().next().value;
      if (oldest === undefined) break;
      this.#entries.delete(oldest);
    }
  }

  async #build(
    bytes: Uint8Array,
    hash: string,
    options: { file: string; capPages: number },
    /** The component's transpiled files, already read from the disk cache and checked (preload). */
    cachedFiles?: TranspiledFiles,
  ): Promise<Prepared> {
    const kind = detectWasmKind(bytes, options.file);
    if (kind === 'module') {
      const capped = capMemory(bytes, {
        file: options.file,
        capPages: options.capPages,
        allowMemoryImport: false,
      });
      const hosted = memoryFromHost(capped.bytes, options.file);
      const module = await compile(hosted?.bytes ?? capped.bytes, options.file);
      const foreignImports = webAssembly()
        .Module.imports(module)
        .filter((i) => i.module !== 'wasi_snapshot_preview1')
        .filter((i) => hosted === undefined || i.module !== HOST_MEMORY_IMPORT.module)
        .map((i) => `${i.module}.${i.name}`);
      const key = `module:${hash}:${options.capPages}`;
      const maxPages = capped.maxPages[0] ?? 0;
      return { kind, key, module, memory: hosted?.memory, maxPages, foreignImports };
    }
    const files = cachedFiles ?? (await this.#transpiled(bytes, hash, options.file));
    const modules: Record<string, WasmModule> = {};
    const memories: Record<string, HostMemory> = {};
    let maxPages = 0;
    // Compiled together: V8 compiles each on its background threads, and one await per module
    // would leave this thread idle between them.
    const compiling: Array<Promise<void>> = [];
    for (const [name, core] of Object.entries(files.cores)) {
      const capped = capMemory(core, {
        file: `${options.file} (${name})`,
        capPages: options.capPages,
        allowMemoryImport: true,
      });
      maxPages = Math.max(maxPages, ...capped.maxPages);
      const hosted = memoryFromHost(capped.bytes, `${options.file} (${name})`);
      if (hosted !== undefined) memories[name] = hosted.memory;
      compiling.push(
        compile(hosted?.bytes ?? capped.bytes, options.file).then((module) => {
          modules[name] = module;
        }),
      );
    }
    await Promise.all(compiling);
    const jsUrl = `data:text/javascript;base64,${Buffer.from(files.js).toString('base64')}`;
    const key = `component:${this.#transpilerId()}:${hash}:${options.capPages}`;
    return { kind, key, jsUrl, modules, memories, maxPages, imports: files.imports };
  }

  /** `@bytecodealliance/jco-transpile@<version>` of the installed transpiler (read once per cache). */
  #transpilerId(): string {
    if (this.#transpiler === undefined) {
      let version = 'unknown';
      try {
        const entry = createRequire(import.meta.url).resolve('@bytecodealliance/jco-transpile');
        version = packageVersion(entry, '@bytecodealliance/jco-transpile') ?? version;
      } catch {
        // Not installed: the transpile itself reports it; nothing is cached under an unknown key.
      }
      this.#transpiler = `@bytecodealliance/jco-transpile@${version}`;
    }
    return this.#transpiler;
  }

  /** `<cacheDir>/wasm/<transpiler version>/<component sha256>/`, or undefined when nothing is kept on disk. */
  #entryDir(hash: string): string | undefined {
    const transpiler = this.#transpilerId();
    const versionDir = transpiler.slice(transpiler.lastIndexOf('@') + 1).replace(/[^A-Za-z0-9._-]/g, '_');
    return this.#cacheDir === undefined || versionDir === 'unknown'
      ? undefined
      : path.join(this.#cacheDir, 'wasm', versionDir, hash);
  }

  async #transpiled(bytes: Uint8Array, hash: string, file: string): Promise<TranspiledFiles> {
    const transpiler = this.#transpilerId();
    const dir = this.#entryDir(hash);
    const expect = { component: hash, transpiler };
    if (dir !== undefined) {
      const cached = await readCached(dir, expect);
      if (cached.ok) return cached.files;
      // A damaged or foreign entry is moved aside so the fresh transpile can take its place.
      if (cached.present) await discard(dir);
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
        { cause: err },
      );
    }
    const js = result.files[JS_FILE];
    if (js === undefined)
      throw new CapsuleError('RUNNER_FAILED', `transpiling ${file} produced no ${JS_FILE}`, { file });
    const cores: Record<string, Uint8Array> = {};
    for (const [name, data] of Object.entries(result.files)) if (name.endsWith('.wasm')) cores[name] = data;
    const imports = result.imports.map((i) => i.replace(/@[^/]*$/, ''));
    const out: TranspiledFiles = { js, cores, imports };
    if (dir !== undefined) await writeCached(dir, out, expect);
    return out;
  }
}

async function compile(bytes: Uint8Array, file: string): Promise<WasmModule> {
  try {
    return await webAssembly().compile(bytes);
  } catch (err) {
    throw new CapsuleError(
      'RUNNER_FAILED',
      `${file} does not compile: ${(err as Error).message}`,
      {
        file,
        hint: 'The binary is malformed or uses a Wasm feature Node 20 does not support.',
      },
      { cause: err },
    );
  }
}

function digest(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Version in the package.json of the package `name` that holds `entry` (walking up from it). */
function packageVersion(entry: string, name: string): string | undefined {
  let dir = path.dirname(entry);
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
        name?: unknown;
        version?: unknown;
      };
      if (pkg.name === name && typeof pkg.version === 'string') return pkg.version;
    } catch {
      // No package.json here: keep walking up.
    }
    const parent = path.dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

type CachedRead = { ok: true; files: TranspiledFiles } | { ok: false; present: boolean };

/**
 * Reads one entry and checks it against its meta.json: same component hash and transpiler, every
 * listed file present with its recorded sha256, no unlisted module. The bytes checked are the
 * bytes returned (nothing is read twice).
 */
async function readCached(
  dir: string,
  expect: { component: string; transpiler: string },
): Promise<CachedRead> {
  let metaText: string;
  try {
    metaText = await readFile(path.join(dir, 'meta.json'), 'utf8');
  } catch {
    const present = await stat(dir).then(
      () => true,
      () => false,
    );
    return { ok: false, present };
  }
  try {
    const meta = cacheMetaSchema.parse(JSON.parse(metaText));
    if (meta.component !== expect.component || meta.transpiler !== expect.transpiler)
      return { ok: false, present: true };
    const listed = Object.keys(meta.files).sort();
    const onDisk = (await readdir(dir)).filter((n) => n !== 'meta.json').sort();
    if (listed.length !== onDisk.length || listed.some((n, i) => n !== onDisk[i]))
      return { ok: false, present: true };
    if (!listed.includes(JS_DISK_FILE)) return { ok: false, present: true };
    let js: Uint8Array | undefined;
    const cores: Record<string, Uint8Array> = {};
    for (const name of listed) {
      const bytes = await readFile(path.join(dir, name));
      if (digest(bytes) !== meta.files[name]) return { ok: false, present: true };
      if (name === JS_DISK_FILE) js = bytes;
      else if (name.endsWith('.wasm')) cores[name] = bytes;
      else return { ok: false, present: true };
    }
    if (js === undefined) return { ok: false, present: true };
    return { ok: true, files: { js, cores, imports: meta.imports } };
  } catch {
    return { ok: false, present: true };
  }
}

/** Moves a bad entry out of the way (renamed first, so a concurrent reader never sees half of it). */
async function discard(dir: string): Promise<void> {
  const aside = `${dir}.bad-${randomBytes(6).toString('hex')}`;
  try {
    await rename(dir, aside);
  } catch {
    return;
  }
  await rm(aside, { recursive: true, force: true });
}

/** Whole directory written beside its final place, then renamed: readers never see half of it. */
async function writeCached(
  dir: string,
  files: TranspiledFiles,
  expect: { component: string; transpiler: string },
): Promise<void> {
  const parent = path.dirname(dir);
  // Private to this user: the cache holds code capsule imports.
  await mkdir(parent, { recursive: true, mode: 0o700 });
  const tmp = path.join(parent, `.tmp-${randomBytes(6).toString('hex')}`);
  await mkdir(tmp, { mode: 0o700 });
  try {
    const recorded: Record<string, string> = { [JS_DISK_FILE]: digest(files.js) };
    await writeFile(path.join(tmp, JS_DISK_FILE), files.js, { mode: 0o600 });
    for (const [name, data] of Object.entries(files.cores)) {
      await writeFile(path.join(tmp, name), data, { mode: 0o600 });
      recorded[name] = digest(data);
    }
    const meta: z.infer<typeof cacheMetaSchema> = {
      format: CACHE_FORMAT,
      ...expect,
      imports: files.imports,
      files: recorded,
    };
    await writeFile(path.join(tmp, 'meta.json'), JSON.stringify(meta), { mode: 0o600 });
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
