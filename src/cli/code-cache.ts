/**
 * V8 code caches for the bundled CLI (docs/architecture.md, "The built CLI"). Node 20 compiles every
 * module from source on every start (it has no compile cache of its own before Node 22), and for a
 * one-shot command that compiling is a large part of its start-up. `npm run build` runs the bundle
 * once with CAPSULE_WRITE_CODE_CACHE=1, which writes each loaded chunk's code cache beside it
 * (`<chunk>.js.cache`); later starts compile a chunk from its cache. A cache file carries the SHA-256
 * of the source it was made from and is used only for that source: V8's own check is little more
 * than the source's length. V8 rejects a cache made by another V8 or under other flags; the chunk
 * then compiles from source, as it would without one — and a rejected cache costs more than none (V8
 * reads it before it gives up), so each set of V8 flags a command runs under has caches of its own
 * (`variant`, see main.ts): `<chunk>.js.cache` for the default flags, `<chunk>.js.<variant>.cache` else.
 */
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { Module } from 'node:module';
import path from 'node:path';
import vm from 'node:vm';

const DIGEST_BYTES = 32;

type CompiledWrapper = (
  exports: unknown,
  require: (id: string) => unknown,
  module: unknown,
  filename: string,
  dirname: string,
) => unknown;

interface LoadingModule {
  exports: unknown;
  require(id: string): unknown;
}

function digest(source: string): Buffer {
  return createHash('sha256').update(source).digest();
}

/** The code cache in `file` when it was made from `source`, else undefined. */
export function readCodeCache(file: string, source: string): Buffer | undefined {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch {
    return undefined;
  }
  if (bytes.length <= DIGEST_BYTES || !bytes.subarray(0, DIGEST_BYTES).equals(digest(source)))
    return undefined;
  return bytes.subarray(DIGEST_BYTES);
}

/** Writes `script`'s code cache for `source` to `file` (whole or not at all). */
export function writeCodeCache(file: string, source: string, script: vm.Script): void {
  const temp = `${file}.${process.pid}.tmp`;
  writeFileSync(temp, Buffer.concat([digest(source), script.createCachedData()]));
  renameSync(temp, file);
}

/** Compiles a CommonJS module's source as Node wraps it, from `cachedData` when V8 accepts it. */
export function compileModule(
  source: string,
  filename: string,
  cachedData: Buffer | undefined,
): { script: vm.Script; run: CompiledWrapper } {
  // No import() callback: one does not survive a code cache (the bundle requires instead, see
  // scripts/bundle-cli.mjs); an import() here fails with ERR_VM_DYNAMIC_IMPORT_CALLBACK_MISSING.
  const script = new vm.Script(Module.wrap(source), { filename, cachedData });
  return { script, run: script.runInThisContext() as CompiledWrapper };
}

/**
 * Compiles the CommonJS modules in `dir` (the bundle's folder) from their code caches; with `write`,
 * (re)writes the cache of every module loaded there when the process exits (each `variant` its own).
 * Modules elsewhere (node_modules, Node's own) load as usual. Does nothing if this Node has no `Module.prototype._compile`.
 * Returns what puts Node's own compile back.
 */
export function useCodeCaches(
  dir: string,
  options: {
    write: boolean;
    /** The V8 flag set this process runs under, when not the default (e.g. `liftoff`). */
    variant?: string | undefined;
  },
): () => void {
  const proto = Module.prototype as unknown as {
    _compile?: (this: LoadingModule, source: string, filename: string) => unknown;
  };
  const original = proto._compile;
  if (typeof original !== 'function') return () => undefined;
  const prefix = dir.endsWith(path.sep) ? dir : `${dir}${path.sep}`;
  const loaded: Array<{ file: string; source: string; script: vm.Script }> = [];
  proto._compile = function compileFromCache(this: LoadingModule, source: string, filename: string) {
    const cacheFile =
      options.variant === undefined ? `${filename}.cache` : `${filename}.${options.variant}.cache`;
    const cachedData = filename.startsWith(prefix) ? readCodeCache(cacheFile, source) : undefined;
    if (cachedData === undefined && !(options.write && filename.startsWith(prefix))) {
      return original.call(this, source, filename);
    }
    const { script, run } = compileModule(source, filename, cachedData);
    if (options.write) loaded.push({ file: cacheFile, source, script });
    const require = Object.assign((id: string) => this.require(id), {
      // Read by commander to name the program when it is not given one.
      main: process.mainModule,
    });
    return run.call(this.exports, this.exports, require, this, filename, path.dirname(filename));
  };
  const writeAll = (): void => {
    for (const { file, source, script } of loaded) {
      try {
        writeCodeCache(file, source, script);
      } catch {
        // A folder this user cannot write (an installed capsule): that chunk keeps compiling from source.
      }
    }
  };
  if (options.write) process.on('exit', writeAll);
  return () => {
    proto._compile = original;
    process.off('exit', writeAll);
  };
}
