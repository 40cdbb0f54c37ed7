import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { DockerEngineConfig } from '../../project/engines.js';
import { CapsuleError } from '../../base/errors.js';
import { DockerodeEngine } from './dockerode-engine.js';
import { EnginePool } from './engine-pool.js';
import type { EnginePoolOptions, PoolEngine } from './engine-pool.js';

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

export async function openEnginePool(
  engines: ReadonlyArray<{ name: string; config: DockerEngineConfig }>,
  options: EnginePoolOptions & { baseDir: string },
): Promise<EnginePool> {
  const members = await Promise.all(engines.map((e) => connectEngine(e.name, e.config, options.baseDir)));
  return new EnginePool(members, options);
}
