import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Capability } from '../../manifest/types.js';
import { EgressSession, type EgressAudit, type Resolver } from '../../network/egress.js';

/**
 * A docker run's way out: capsule's egress proxy on a unix socket in a fresh folder, bind-mounted into
 * that run's container only (see spec.ts EGRESS_MOUNT and docs/network.md). Undefined without grants.network.
 */
export interface DockerEgress {
  /** Host folder holding `egress.sock`. */
  dir: string;
  session: EgressSession;
  close(): Promise<void>;
}

export async function openDockerEgress(
  capability: Capability,
  options: { resolve?: Resolver | undefined; audit?: EgressAudit | undefined },
): Promise<DockerEgress | undefined> {
  if (capability.manifest.grants.network.length === 0) return undefined;
  const [{ startEgressProxy }] = await Promise.all([import('../../network/proxy.js')]);
  const dir = await mkdtemp(path.join(tmpdir(), 'capsule-egress-'));
  try {
    // Searchable, not listable: the sandbox user reaches the socket by its name only.
    await chmod(dir, 0o711);
    const session = new EgressSession({ capability, resolve: options.resolve, audit: options.audit });
    const proxy = await startEgressProxy(session, path.join(dir, 'egress.sock'));
    return {
      dir,
      session,
      async close() {
        await proxy.close();
        await session.close();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}
