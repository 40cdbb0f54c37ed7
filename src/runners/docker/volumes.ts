import { randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';
import type tar from 'tar-fs';
import type { Capability } from '../../manifest/types.js';
import { TOOLS_MOUNT } from './call.js';
import type { DockerEngine } from './engine.js';
import type { ImageBuilder, ImageProgress } from './images.js';
import { CAPABILITY_LABEL, ROLE_LABEL, ownerLabels } from './labels.js';
import type { Owner } from './labels.js';
import { CAPABILITY_MOUNT, buildContainerSpec } from './spec.js';
import { SANDBOX_IMAGES } from './image-recipes.js';

/** A host name as it may appear in a volume name. */
function sanitizeHost(host: string): string {
  return host.replace(/[^a-zA-Z0-9_.-]/g, '_').slice(0, 40);
}

/**
 * Volume names carry their owner (listVolumes gives names only), so a reaper can tell a dead process's
 * volumes apart: `capsule-cap-HOST-pPID-INSTANCE-SUFFIX`.
 */
function volumeName(owner: Owner, suffix: string): string {
  return `capsule-cap-${sanitizeHost(owner.host)}-p${owner.pid}-${owner.instance}-${suffix}`;
}

/**
 * The canary volume that binds an engine to the daemon it measured (engine-pin.ts): random, so no other daemon
 * has it; named like the others, so a dead process's canary is reaped.
 */
export function canaryVolume(
  owner: Owner,
  labels: Record<string, string> = {},
): { name: string; labels: Record<string, string> } {
  return {
    name: volumeName(owner, `pin-${randomBytes(16).toString('hex')}`),
    labels: { ...labels, ...ownerLabels(owner), [ROLE_LABEL]: 'pin' },
  };
}

/** The owner pid a capsule volume name carries on `host`, or undefined for other names and hosts. */
export function volumeOwnerPid(name: string, host: string): number | undefined {
  const m = /^capsule-cap-(.+)-p(\d+)-/.exec(name);
  return m !== null && m[1] === sanitizeHost(host) ? Number(m[2]) : undefined;
}

/**
 * The volumes one docker runner makes: the watchdog's busybox for images that are not capsule's own, and
 * copies of capability folders for engines that cannot see host paths. Each is made once and removed by
 * `removeAll()`.
 */
export class RunnerVolumes {
  /** Volumes holding copied capability folders, by content hash. */
  private readonly copies = new Map<string, Promise<string>>();
  private tools: Promise<string> | undefined;

  constructor(
    private readonly engine: DockerEngine,
    private readonly images: ImageBuilder,
    private readonly owner: Owner,
    private readonly onProgress: ImageProgress,
  ) {}

  /**
   * A volume holding capsule/busybox's static binary, mounted read-only at TOOLS_MOUNT into containers of any
   * other image so their watchdog runs there too (made once per runner; a volume works for remote engines).
   */
  toolsVolume(): Promise<string> {
    if (this.tools !== undefined) return this.tools;
    const name = volumeName(this.owner, 'tools');
    const job = (async () => {
      await this.engine.createVolume(name, { ...ownerLabels(this.owner), [ROLE_LABEL]: 'tools' });
      await this.images.ensure(SANDBOX_IMAGES.busybox, this.onProgress);
      const helper = await this.engine.createContainer({
        image: SANDBOX_IMAGES.busybox,
        entrypoint: [],
        cmd: ['/bin/cp', '/bin/busybox', `${TOOLS_MOUNT}/busybox`],
        workingDir: '/',
        // Root owns the fresh volume; nothing but this copy runs in the helper.
        user: '0:0',
        env: [],
        labels: { ...ownerLabels(this.owner), [ROLE_LABEL]: 'tools' },
        openStdin: false,
        runtime: 'runc',
        networkDisabled: true,
        networkMode: 'none',
        pidMode: '',
        ipcMode: 'private',
        privileged: false,
        readonlyRootfs: true,
        capDrop: ['ALL'],
        capAdd: [],
        securityOpt: ['no-new-privileges'],
        memoryBytes: 64 * 1024 * 1024,
        memorySwapBytes: 64 * 1024 * 1024,
        pidsLimit: 8,
        nanoCpus: 1e8,
        ulimits: [],
        tmpfs: {},
        mounts: [{ type: 'volume', source: name, target: TOOLS_MOUNT, readOnly: false }],
        logDriver: 'none',
      });
      try {
        await this.engine.start(helper);
        const code = await this.engine.wait(helper);
        if (code !== 0) throw new Error(`copying busybox into ${name} exited ${code}`);
      } finally {
        await this.engine.remove(helper).catch(() => {});
      }
      return name;
    })();
    this.tools = job;
    job.catch(() => {
      if (this.tools === job) this.tools = undefined;
    });
    return job;
  }

  /** A volume holding a copy of the capability folder (remote engines), made once per content hash. */
  copyVolume(capability: Capability): Promise<string> {
    const key = capability.contentHash;
    const existing = this.copies.get(key);
    if (existing !== undefined) return existing;
    const name = volumeName(this.owner, key.replace(/^sha256:/, '').slice(0, 16));
    const job = (async () => {
      await this.engine.createVolume(name, {
        ...ownerLabels(this.owner),
        [CAPABILITY_LABEL]: capability.name,
      });
      await this.images.ensure(SANDBOX_IMAGES.busybox, this.onProgress);
      // putArchive needs a container with the volume mounted; it is never started.
      const helper = await this.engine.createContainer({
        ...buildContainerSpec(capability, {
          capabilityFiles: { type: 'volume', volume: name },
          labels: { ...ownerLabels(this.owner), [ROLE_LABEL]: 'copy' },
          hostEnv: {},
          cpus: 0.1,
        }),
        image: SANDBOX_IMAGES.busybox,
        cmd: ['true'],
        readonlyRootfs: false,
        mounts: [{ type: 'volume', source: name, target: CAPABILITY_MOUNT, readOnly: false }],
      });
      try {
        // Readable by the sandbox user whatever the host modes; symlinks stay symlinks (never followed).
        const { default: tarFs } = await import('tar-fs');
        const archive = tarFs.pack(capability.dir, {
          umask: 0o022,
          fmode: 0o444,
          dmode: 0o555,
        } as tar.PackOptions) as unknown as Readable;
        await this.engine.putArchive(helper, CAPABILITY_MOUNT, archive);
      } finally {
        await this.engine.remove(helper);
      }
      return name;
    })();
    this.copies.set(key, job);
    job.catch(() => this.copies.delete(key));
    return job;
  }

  /** Remove every volume made (those that failed to be made are skipped). */
  async removeAll(): Promise<void> {
    const made = await Promise.all(
      [...this.copies.values(), ...(this.tools === undefined ? [] : [this.tools])].map((v) =>
        v.catch(() => undefined),
      ),
    );
    await Promise.all(
      made.map((v) => (v === undefined ? undefined : this.engine.removeVolume(v).catch(() => {}))),
    );
  }
}
