import { createHash } from 'node:crypto';
import { canonicalJson } from '../../project/state-key.js';

/** The /info fields a daemon's configuration shows in (not its counters or clock), hashed. */
const CONFIG_FIELDS = [
  'Runtimes',
  'DefaultRuntime',
  'SecurityOptions',
  'InitBinary',
  'InitCommit',
  'RuncCommit',
  'ContainerdCommit',
  'CgroupDriver',
  'CgroupVersion',
  'Driver',
  'KernelVersion',
  'OperatingSystem',
  'LiveRestoreEnabled',
  'Isolation',
  'Labels',
  'ExperimentalBuild',
  'ServerVersion',
  'DockerRootDir',
  'ID',
  'Name',
] as const;

/**
 * sha256 of what GET /info says of the daemon's configuration (EngineIdentity.config): a daemon reloaded or
 * restarted with another configuration it reports shows another value.
 */
export function configFingerprint(info: Record<string, unknown>): string {
  const picked = Object.fromEntries(CONFIG_FIELDS.map((k) => [k, info[k] ?? null]));
  return `sha256:${createHash('sha256').update(canonicalJson(picked)).digest('hex')}`;
}
