import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import wabtInit from 'wabt';
import type { Capability } from '../../../../src/manifest/types.js';
import type { WasmRunSpec } from '../../../../src/runners/wasm/wasm-runner.js';
import { loadValid, tempProject, writeCapability } from '../../../helpers/capability.js';

export const FIXTURES = new URL('../../../../fixtures/wasm/', import.meta.url);

const wabt = await wabtInit();

/** Assembles one of fixtures/wasm/*.wat into a module (built at test time: no binaries committed). */
export function assemble(name: string): Uint8Array {
  const text = readFileSync(new URL(name, FIXTURES), 'utf8');
  return wabt.parseWat(name, text).toBinary({}).buffer;
}

/** A run of `bytes` with `input` on stdin and nothing granted: no args, env or folders, generous limits. */
export function rawSpec(
  file: string,
  bytes: Uint8Array,
  input: string,
  extra: Partial<WasmRunSpec> = {},
): WasmRunSpec {
  return {
    file,
    bytes,
    programName: file.replace(/\.wasm$/, ''),
    args: [],
    env: {},
    input: Buffer.from(input),
    dirs: [],
    timeoutMs: 10_000,
    memoryMb: 64,
    outputBytes: 1024 * 1024,
    ...extra,
  };
}

export interface WasmCapabilityOptions {
  manifest?: Record<string, unknown>;
  /** Files to create in the project, relative to its root (grants point at them). */
  projectFiles?: Record<string, string>;
}

/** Writes a wasm capability into a fresh temp project and loads it through the real loader. */
export async function wasmCapability(
  name: string,
  wasm: Uint8Array,
  options: WasmCapabilityOptions = {},
): Promise<{ capability: Capability; root: string }> {
  const { root, capRoot } = await tempProject('capsule-wasm-');
  for (const [rel, text] of Object.entries(options.projectFiles ?? {})) {
    await mkdir(path.dirname(path.join(root, rel)), { recursive: true });
    await writeFile(path.join(root, rel), text);
  }
  const dir = await writeCapability(
    capRoot,
    name,
    {
      description: `wasm test capability ${name}`,
      environment: 'wasm',
      entry: `${name}.wasm`,
      interpreter: undefined,
      ...options.manifest,
    },
    { [`${name}.wasm`]: wasm },
  );
  return { capability: await loadValid(dir, root, capRoot), root };
}
