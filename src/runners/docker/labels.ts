import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

/** Every container and volume capsule creates carries these, so they can be found and reaped. */
export const MANAGED_LABEL = 'capsule.managed';
export const HOST_LABEL = 'capsule.host';
export const PID_LABEL = 'capsule.pid';
export const INSTANCE_LABEL = 'capsule.instance';
export const CAPABILITY_LABEL = 'capsule.capability';
export const ROLE_LABEL = 'capsule.role';

export interface Owner {
  host: string;
  pid: number;
  /** Random per runner instance: tells apart two runners in one process. */
  instance: string;
}

export function ownerLabels(owner: Owner): Record<string, string> {
  return {
    [MANAGED_LABEL]: '1',
    [HOST_LABEL]: owner.host,
    [PID_LABEL]: String(owner.pid),
    [INSTANCE_LABEL]: owner.instance,
  };
}

export function currentHost(): string {
  return hostname();
}

/** This process as the owner of what it creates; `instance` is random unless named. */
export function processOwner(instance: string = randomBytes(6).toString('hex')): Owner {
  return { host: currentHost(), pid: process.pid, instance };
}

/**
 * Whether a labelled object was left by a capsule process that no longer exists on this host.
 * Objects from other hosts (a shared remote engine) or from live processes are never touched;
 * a reused pid only delays reaping, it never removes a live run.
 */
export function isOrphan(
  labels: Record<string, string>,
  host: string,
  isAlive: (pid: number) => boolean,
): boolean {
  if (labels[MANAGED_LABEL] !== '1' || labels[HOST_LABEL] !== host) return false;
  const pid = Number(labels[PID_LABEL]);
  if (!Number.isInteger(pid) || pid <= 0) return true;
  return !isAlive(pid);
}
