import { homedir } from 'node:os';
import path from 'node:path';
import { userCacheDir } from '../base/cache-dir.js';
import { userStateDir } from '../base/user-state.js';
import type { DockerEngineConfig } from '../project/engines.js';
import { LazyRunner } from '../runners/lazy-runner.js';
import { ShellRunner } from '../runners/shell-runner.js';
import type { Runner } from '../runners/types.js';
import type { WasmRunner, WasmRunnerOptions } from '../runners/wasm/wasm-runner.js';
import type { StateKey } from '../project/state-key.js';
import type { HostProtection } from '../project/protected-state.js';

export interface DefaultRunnerOptions {
  projectRoot: string;
  /** Host environment granted variables are taken from (openRuntime passes its own; no default). */
  env: NodeJS.ProcessEnv;
  /** capsule's per-user cache folder (default: `userCacheDir(env)`, never inside the project). */
  cacheDir?: string | undefined;
  /**
   * capsule's per-user state folder (default: `userStateDir(env)`): the wasm and docker runners refuse
   * a grant of it again before each run, whoever built the capability.
   */
  stateDir?: string | undefined;
  /**
   * The per-user key of `stateDir`: with it, configured engines' measured postures are kept there (MACed) and
   * a later process on the same daemon skips the probe. Without it every process measures its engines.
   */
  stateKey?: StateKey | undefined;
  /** What shell capabilities may not change or see (default: the project's protected paths read-only). */
  protection?: HostProtection | undefined;
  /** Progress of long runner work (docker image builds). */
  onProgress?: (message: string) => void;
  /**
   * The Docker engines docker capabilities may run on (capsule.json `engines` plus $CAPSULE_ENGINES, narrowed by
   * `--engine`). Empty or absent: the one engine of DOCKER_HOST or the local socket.
   */
  engines?: ReadonlyArray<{ name: string; config: DockerEngineConfig }> | undefined;
}

/**
 * The three runners of a session. Each starts lazily: a session that never runs docker never touches the
 * engine, and the wasm and docker runners' modules load only when a capability of theirs runs.
 */
export function createDefaultRunners(options: DefaultRunnerOptions): Runner[] {
  const { env } = options;
  const cacheDir = options.cacheDir ?? userCacheDir(env);
  const stateDir = options.stateDir ?? userStateDir(env, homedir());
  const engines = options.engines ?? [];
  return [
    // capsule's own state (capsule.json, .capsule/, the per-user cache and state) is read-only to
    // shell capabilities.
    new ShellRunner({ hostEnv: env, projectRoot: options.projectRoot, protection: options.protection }),
    // Workers start on the first wasm call (or its hint); transpiled components are cached per user, outside
    // every project, so no grant can reach code capsule imports.
    new LazyRunner(
      'wasm',
      async () => {
        return createWasmRunner({ cacheDir, stateDir, projectRoot: options.projectRoot, hostEnv: env });
      },
      // Its first call waits for a worker: the executor's hint starts one while the call is staged and judged.
      { warms: true },
    ),
    // A missing capsule image is built on first use, with its progress reported.
    engines.length === 0
      ? new LazyRunner(
          'docker',
          async () => {
            const { DockerRunner } = await import('../runners/docker/runner.js');
            return new DockerRunner({
              env,
              projectRoot: options.projectRoot,
              cacheDir,
              stateDir,
              onProgress: options.onProgress,
            });
          },
          // The engine is reached while the call is staged and judged (no dockerode to load any more: a call
          // the gate denies pays a ping).
          { warms: true },
        )
      : // Several engines: the pool schedules across them and measures each one's posture before judging.
        new LazyRunner(
          'docker',
          async () => {
            const [{ openEnginePool }, { PostureStore }] = await Promise.all([
              import('./engines.js'),
              import('../runners/docker/posture-store.js'),
            ]);
            const key = options.stateKey;
            return openEnginePool(engines, {
              baseDir: options.projectRoot,
              postures: key === undefined ? undefined : new PostureStore({ stateDir, key }),
              // This user's processes place their calls one at a time, each seeing the claims before it.
              placementLock: path.join(stateDir, 'engine-placement.lock'),
              runner: {
                env,
                projectRoot: options.projectRoot,
                cacheDir,
                stateDir,
                onProgress: options.onProgress,
              },
            });
          },
          { measures: true },
        ),
  ];
}

/**
 * One Wasm runner on its own, its module loaded now: the session's lazy wasm runner above, and `capsule wasm
 * run` of a raw module (the deliberately ungated path: a person names the module and its grants on the
 * command line; no capability, no gate).
 */
export async function createWasmRunner(options: WasmRunnerOptions): Promise<WasmRunner> {
  const { WasmRunner } = await import('../runners/wasm/wasm-runner.js');
  return new WasmRunner(options);
}
