import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { packageRoot } from '../../base/package-root.js';
import { CapsuleError } from '../../base/errors.js';
import { detectWasmKind } from './binary.js';
import type { componentize as ComponentizeFn } from 'componentize-qjs';

/** The WIT world JS capabilities are built against (runtimes/wasm: capability.wit and its WASI deps/). */
export function defaultWitPath(): string {
  return path.join(packageRoot(), 'runtimes', 'wasm');
}

/**
 * The web globals QuickJS lacks (TextEncoder, TextDecoder, URL, URLSearchParams, structuredClone), built
 * into every component made from JavaScript (runtimes/js/web-globals.js).
 */
export function webGlobalsPath(): string {
  return path.join(packageRoot(), 'runtimes', 'js', 'web-globals.js');
}

/** The name the prelude has beside the author's module while it is built. */
const PRELUDE_NAME = 'capsule-web-globals.js';

/**
 * The module that is built: the author's, importing the prelude first. On the same line as the author's
 * first, so an error's line number is still the line of their file.
 */
export function withWebGlobals(source: string): string {
  return `import './${PRELUDE_NAME}'; ${source}`;
}

export interface ComponentizeProgress {
  stage: 'start' | 'componentize' | 'done';
  message: string;
}

export interface ComponentizeOptions {
  /** Called as the build advances (componentize takes 1–3 s). */
  onProgress?: ((event: ComponentizeProgress) => void) | undefined;
  /** WIT file or directory; default: runtimes/wasm (capability.wit and its WASI deps/). */
  witPath?: string | undefined;
  /** Name of the source file, for error messages. */
  file?: string | undefined;
}

export interface ComponentArtifacts {
  /** The Wasm component (QuickJS + the snapshotted module), ready to write as `<name>.wasm`. */
  component: Uint8Array;
  /** `sha256:<hex>` of the component bytes. */
  sha256: string;
  durationMs: number;
}

/**
 * Turns a JavaScript ES module exporting `run(input: string): string` into a Wasm component with
 * componentize-qjs (QuickJS, non-async ABI so Node 20 can run it synchronously). The generate tools
 * call this at generate time; the runner later transpiles and runs the component in its sandbox.
 */
export async function componentizeJs(
  source: string,
  options: ComponentizeOptions = {},
): Promise<ComponentArtifacts> {
  const file = options.file ?? 'source.js';
  const witPath = options.witPath ?? defaultWitPath();
  const started = performance.now();
  if (
    !/\bexport\s+(async\s+)?function\s+run\b|\bexport\s+(const|let|var)\s+run\b|\bexport\s*\{[^}]*\brun\b/.test(
      source,
    )
  ) {
    throw new CapsuleError('INPUT_INVALID', `${file} does not export a function named run`, {
      file,
      hint: 'Write an ES module with `export function run(input) { … return text; }` (input is the JSON text).',
    });
  }
  if (!existsSync(witPath)) {
    throw new CapsuleError('NOT_FOUND', `the WIT world ${witPath} is missing`, {
      file: witPath,
      hint: 'Reinstall capsule.',
    });
  }
  options.onProgress?.({ stage: 'start', message: `componentizing ${file}` });
  let componentize: typeof ComponentizeFn;
  try {
    ({ componentize } = await import('componentize-qjs'));
  } catch (err) {
    throw new CapsuleError(
      'RUNNER_UNAVAILABLE',
      `componentize-qjs cannot be loaded: ${(err as Error).message}`,
      {
        hint: 'Reinstall capsule’s dependencies (npm install); componentize-qjs ships a native binding per platform.',
      },
      { cause: err },
    );
  }
  let component: Uint8Array;
  // The prelude is imported from beside the module, in a folder of this build's own.
  const dir = await mkdtemp(path.join(tmpdir(), 'capsule-componentize-'));
  try {
    options.onProgress?.({ stage: 'componentize', message: 'building the QuickJS component' });
    const jsSource = withWebGlobals(source);
    const jsPath = path.join(dir, 'capability.js');
    await writeFile(path.join(dir, PRELUDE_NAME), await readFile(webGlobalsPath()));
    await writeFile(jsPath, jsSource);
    ({ component } = await componentize({ witPath, jsSource, jsPath, moduleRoot: dir, sync: true }));
  } catch (err) {
    throw new CapsuleError(
      'INPUT_INVALID',
      `${file} could not be built into a Wasm component: ${(err as Error).message ?? String(err)}`,
      {
        file,
        hint: 'Fix the JavaScript (it must be a plain ES module without Node or browser APIs, exporting run(input)).',
      },
      { cause: err },
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  detectWasmKind(component, file);
  const sha256 = `sha256:${createHash('sha256').update(component).digest('hex')}`;
  const durationMs = performance.now() - started;
  options.onProgress?.({
    stage: 'done',
    message: `built ${component.length} bytes in ${Math.round(durationMs)} ms`,
  });
  return { component: new Uint8Array(component), sha256, durationMs };
}
