/**
 * The slice of the WebAssembly JS API capsule uses. The project compiles without the DOM lib and
 * @types/node 20 does not declare the `WebAssembly` global, so it is typed here once.
 */

/** A compiled module (opaque; structured-cloneable to workers). */
export interface WasmModule {
  readonly __wasmModule?: never;
}

export interface WasmMemory {
  readonly buffer: ArrayBuffer;
}

export interface WasmInstance {
  readonly exports: Record<string, unknown>;
}

export type WasmImports = Record<string, Record<string, unknown>>;

interface ErrorClass {
  new (message?: string): Error;
}

export interface WebAssemblyApi {
  compile(bytes: Uint8Array): Promise<WasmModule>;
  Module: {
    new (bytes: Uint8Array): WasmModule;
    imports(module: WasmModule): Array<{ module: string; name: string; kind: string }>;
  };
  Instance: new (module: WasmModule, imports?: WasmImports) => WasmInstance;
  Memory: new (limits: { initial: number; maximum?: number }) => WasmMemory;
  CompileError: ErrorClass;
  LinkError: ErrorClass;
  RuntimeError: ErrorClass;
}

/** The global WebAssembly object, typed. */
export function webAssembly(): WebAssemblyApi {
  return (globalThis as unknown as { WebAssembly: WebAssemblyApi }).WebAssembly;
}
