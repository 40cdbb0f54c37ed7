import { stat } from 'node:fs/promises';
import { CapsuleError } from '../base/errors.js';
import type { WasmRawResult, WasmRunSpec } from '../runners/wasm/wasm-runner.js';
import { createWasmRunner } from './runners.js';

/**
 * What a person hands `capsule wasm run`: one module file and exactly what it gets (argv, --env, --dir, limits).
 * No Capability, no grants, no network: nothing here names a capability for it to run.
 */
export type UngatedModuleSpec = Pick<
  WasmRunSpec,
  | 'file'
  | 'args'
  | 'programName'
  | 'env'
  | 'input'
  | 'dirs'
  | 'timeoutMs'
  | 'memoryMb'
  | 'outputBytes'
  | 'writeBytes'
  | 'signal'
>;

/** A module is a file: a folder (a capability folder above all) is refused, it runs with `capsule run`. */
export async function assertModuleFile(file: string): Promise<void> {
  if ((await stat(file).catch(() => undefined))?.isDirectory() === true) {
    throw new CapsuleError('NOT_FOUND', `${file} is a folder, not a .wasm file.`, {
      file,
      hint: 'Give the path of a WebAssembly module or component.',
    });
  }
}

/**
 * capsule's one deliberately ungated run (`capsule wasm run`, like `wasmtime run`): a raw .wasm module or component
 * in the Wasm sandbox with only what the person named, asking no gate and holding no permit. It takes a file,
 * never a Capability, so a capability still runs only through the executor; the sandbox itself (confined
 * folders, caps, no sockets) is the same as a capability's.
 */
export async function runUngatedModule(
  spec: UngatedModuleSpec,
  options: { cacheDir?: string | undefined },
): Promise<WasmRawResult> {
  await assertModuleFile(spec.file);
  const runner = await createWasmRunner({ cacheDir: options.cacheDir, poolSize: 1 });
  try {
    return await runner.runRaw({
      file: spec.file,
      args: spec.args,
      programName: spec.programName,
      env: spec.env,
      input: spec.input,
      dirs: spec.dirs,
      timeoutMs: spec.timeoutMs,
      memoryMb: spec.memoryMb,
      outputBytes: spec.outputBytes,
      writeBytes: spec.writeBytes,
      signal: spec.signal,
    });
  } finally {
    await runner.close();
  }
}
