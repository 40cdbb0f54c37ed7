import type { DockerEngine } from './engine.js';
import { MANAGED_LABEL, isOrphan } from './labels.js';
import { processAlive } from '../process-alive.js';
import { volumeOwnerPid } from './volumes.js';

/**
 * Remove the containers and volumes that capsule processes of `host` left on `engine` when they died
 * (crash, SIGKILL): their owner labels name a pid that no longer runs here. Objects of other hosts and of
 * live processes are left alone. Returns how many objects were removed.
 */
export async function reapOrphans(engine: DockerEngine, host: string): Promise<number> {
  const containers = (await engine.listContainers([`${MANAGED_LABEL}=1`])).filter((c) =>
    isOrphan(c.labels, host, processAlive),
  );
  await Promise.all(containers.map((c) => engine.remove(c.id).catch(() => {})));
  // Volumes: listVolumes gives names only, so the owner pid is encoded in the name (volumes.ts).
  const volumes = await engine.listVolumes([`${MANAGED_LABEL}=1`]);
  const dead = volumes.filter((name) => {
    const pid = volumeOwnerPid(name, host);
    return pid !== undefined && !processAlive(pid);
  });
  await Promise.all(dead.map((v) => engine.removeVolume(v).catch(() => {})));
  return containers.length + dead.length;
}
