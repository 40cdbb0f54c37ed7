import { chmod, lstat, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CapsuleError } from '../../base/errors.js';
import type { Capability } from '../../manifest/types.js';
import { EgressSession, type EgressAudit, type Resolver } from '../../network/egress.js';
import { isPrivateFolder } from '../private-folder.js';

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

/**
 * The folder every run's socket folder lives in: capsule's user's own (0700), so no other local user, and
 * no container whose grants reach the temp folder, can find or reach another run's socket (it answers
 * with that run's grants). The engine bind-mounts the run's folder all the same; inside the container
 * only the mount is visible, so the sandbox user needs nothing of the folders above it.
 */
async function privateParent(): Promise<string> {
  const uid = process.getuid?.();
  const parent = path.join(tmpdir(), `capsule-egress-${uid ?? 'user'}`);
  await mkdir(parent, { recursive: true, mode: 0o700 });
  // A folder planted under that name by someone else would be theirs to read: refuse it.
  const info = await lstat(parent);
  if (!isPrivateFolder(info, uid)) {
    throw new CapsuleError(
      'RUNNER_UNAVAILABLE',
      `${parent} is not a private folder of this user; capsule will not put a run's egress socket there.`,
      { file: parent, hint: 'Remove it (or set TMPDIR to a folder of your own) and run again.' },
    );
  }
  return parent;
}

export async function openDockerEgress(
  capability: Capability,
  options: { resolve?: Resolver | undefined; audit?: EgressAudit | undefined },
): Promise<DockerEgress | undefined> {
  if (capability.manifest.grants.network.length === 0) return undefined;
  const { startEgressProxy } = await import('../../network/proxy.js');
  const dir = await mkdtemp(path.join(await privateParent(), 'run-'));
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
