import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { DockerEngineConfig } from '../project/engines.js';
import { CapsuleError } from '../base/errors.js';
import { DockerodeEngine } from '../runners/docker/dockerode-engine.js';
import { EnginePool } from '../runners/docker/engine-pool.js';
import type { EnginePoolOptions, PoolEngine } from '../runners/docker/engine-pool.js';
import { ImageBuilder } from '../runners/docker/images.js';

// Where capsule's Docker parts are made from configuration: the one engine of DOCKER_HOST (or the local
// socket), each configured engine, their pool and the image builder. Callers load this module lazily: it
// brings the Docker client with it.

/** The engine of DOCKER_HOST in `env`, or the local socket: the one engine when none is configured. */
export function connectDefaultEngine(env: NodeJS.ProcessEnv): DockerodeEngine {
  return new DockerodeEngine({ env });
}

/** The builder of capsule's offline sandbox images (runtimes/docker) on `engine`. */
export function openImageBuilder(engine: DockerodeEngine): ImageBuilder {
  return new ImageBuilder({ engine });
}

/** One configured engine as a DockerEngine (TLS material read now, so a missing file names its field). */
export async function connectEngine(
  name: string,
  config: DockerEngineConfig,
  baseDir: string,
): Promise<PoolEngine> {
  let tls: { ca: Buffer; cert: Buffer; key: Buffer } | undefined;
  if (config.tls !== undefined) {
    const read = async (field: 'ca' | 'cert' | 'key'): Promise<Buffer> => {
      const file = path.resolve(baseDir, config.tls?.[field] ?? '');
      try {
        return await readFile(file);
      } catch (err) {
        throw new CapsuleError(
          'USAGE',
          `engine ${name}: cannot read tls.${field} ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
          { field: `engines.${name}.tls.${field}`, engine: name },
          { cause: err },
        );
      }
    };
    tls = { ca: await read('ca'), cert: await read('cert'), key: await read('key') };
  }
  if (config.type === 'swarm')
    return {
      name,
      kind: 'swarm',
      host: config.manager,
      engine: new DockerodeEngine({ host: config.manager, tls }),
    };
  return { name, host: config.host, engine: new DockerodeEngine({ host: config.host, tls }) };
}

/** A pool over engines already connected (`capsule engines` measures one engine through its own pool). */
export function enginePoolOf(members: readonly PoolEngine[], options: EnginePoolOptions = {}): EnginePool {
  return new EnginePool(members, options);
}

/** The configured engines, connected, as one pool: docker capabilities are scheduled across them. */
export async function openEnginePool(
  engines: ReadonlyArray<{ name: string; config: DockerEngineConfig }>,
  options: EnginePoolOptions & { baseDir: string },
): Promise<EnginePool> {
  const members = await Promise.all(engines.map((e) => connectEngine(e.name, e.config, options.baseDir)));
  return enginePoolOf(members, options);
}
