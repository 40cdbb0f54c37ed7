import path from 'node:path';
import { DockerRunner } from '../runners/docker/runner.js';
import { ShellRunner } from '../runners/shell-runner.js';
import type { Runner } from '../runners/types.js';
import { WasmRunner } from '../runners/wasm/wasm-runner.js';

export interface DefaultRunnerOptions {
  projectRoot: string;
  /** Host environment granted variables are taken from. */
  env?: NodeJS.ProcessEnv;
  /** Progress of long runner work (docker image builds). */
  onProgress?: (message: string) => void;
}

/** The three runners of a session. Each starts lazily: a session that never runs docker never touches the engine. */
export function createDefaultRunners(options: DefaultRunnerOptions): Runner[] {
  const env = options.env ?? process.env;
  return [
    // Capsule's own state (capsule.json, .capsule/) is mounted read-only for shell capabilities.
    new ShellRunner({ hostEnv: env, projectRoot: options.projectRoot }),
    // Workers start on the first wasm call; compiled modules are cached under .capsule/cache.
    new WasmRunner({ cacheDir: path.join(options.projectRoot, '.capsule', 'cache'), hostEnv: env }),
    // A missing capsule image is built on first use, with its progress reported.
    new DockerRunner({ env, onProgress: options.onProgress }),
  ];
}
