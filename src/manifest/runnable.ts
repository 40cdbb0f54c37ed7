import { closeSync, openSync, readSync } from 'node:fs';
import type { Manifest } from './schema.js';

/** What the first eight bytes of a file say it is, for the wasm runner. */
export type WasmHeader = 'module' | 'component' | 'not-wasm' | 'unsupported';

const MAGIC = [0x00, 0x61, 0x73, 0x6d];

/**
 * Pure: a core module (`\0asm`, version 1), a component (`\0asm`, version 0x0d, layer 1), another
 * WebAssembly version or layer, or not WebAssembly at all.
 */
export function wasmHeader(bytes: Uint8Array): WasmHeader {
  if (bytes.length < 8 || MAGIC.some((b, i) => bytes[i] !== b)) return 'not-wasm';
  const [v0, v1, v2, v3] = [bytes[4], bytes[5], bytes[6], bytes[7]];
  if (v0 === 1 && v1 === 0 && v2 === 0 && v3 === 0) return 'module';
  if (v0 === 0x0d && v1 === 0 && v2 === 1 && v3 === 0) return 'component';
  return 'unsupported';
}

function head(file: string, bytes: number): Uint8Array {
  const fd = openSync(file, 'r');
  try {
    const buf = new Uint8Array(bytes);
    return buf.subarray(0, readSync(fd, buf, 0, bytes, 0));
  } finally {
    closeSync(fd);
  }
}

/**
 * Why `entry` (a regular file at `realPath` with permission bits `mode`) can never run in the
 * manifest's environment, or undefined. Only what is certain: a wasm entry that is not a module or
 * component the runner takes; a shell or docker entry without an interpreter that cannot be executed
 * (no exec bit: execve refuses it whatever its first line says), and in docker one that is neither a
 * `#!` script nor an ELF binary (the container runtime does not fall back to a shell, as the host's
 * process spawner does).
 */
export function entryProblem(manifest: Manifest, realPath: string, mode: number): string | undefined {
  const entry = manifest.entry;
  if (manifest.environment === 'wasm') {
    const kind = wasmHeader(head(realPath, 8));
    if (kind === 'not-wasm')
      return `${entry} is not WebAssembly (it does not start with the \\0asm magic bytes): point entry at a compiled .wasm (a WASI preview1 module or a component), or build one from JavaScript with "capsule new NAME --env wasm"`;
    if (kind === 'unsupported')
      return `${entry} is WebAssembly of a version or layer capsule does not run: only core modules (version 1) and components (version 0x0d, layer 1) are supported`;
    return undefined;
  }
  if (manifest.interpreter !== undefined) return undefined;
  const first = head(realPath, 4);
  const shebang = first[0] === 0x23 && first[1] === 0x21;
  if ((mode & 0o111) === 0)
    return `${entry} is not executable and no "interpreter" is set: ${shebang ? 'make it executable (chmod +x)' : 'set "interpreter" (e.g. "sh") in capability.json, or add a #! line and make it executable (chmod +x)'}`;
  const elf = first[0] === 0x7f && first[1] === 0x45 && first[2] === 0x4c && first[3] === 0x46;
  if (manifest.environment === 'docker' && !shebang && !elf)
    return `${entry} has no #! line and is not a binary, so the container cannot execute it: add a #! line (e.g. #!/bin/sh) or set "interpreter" (e.g. "sh")`;
  return undefined;
}
