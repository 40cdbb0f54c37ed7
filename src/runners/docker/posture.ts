import { Writable } from 'node:stream';
import { parseManifest } from '../../manifest/parse.js';
import type { Capability } from '../../manifest/types.js';
import type { DockerEngine } from './engine.js';
import { ROLE_LABEL } from './labels.js';
import { buildContainerSpec } from './spec.js';
import { SANDBOX_IMAGES } from './image-recipes.js';

/**
 * What an engine actually gives a hardened call container, measured from inside one (never assumed from
 * the flags capsule sent: a daemon, its runtime or a wrapper around it may drop them).
 */
export interface MeasuredPosture {
  /** Effective capability set (hex, /proc/self/status CapEff). */
  capEff: string;
  /** no_new_privs of the probe process (1: set). */
  noNewPrivs: number | null;
  /** Seccomp mode (0 none, 1 strict, 2 filter). */
  seccomp: number | null;
  uid: number | null;
  /** Network interfaces the container sees (only `lo` when it has no network). */
  interfaces: string[];
  /** Writing to / failed (the root file system is read-only). */
  readOnlyRoot: boolean;
  /** The runtime the probe ran under (runc, runsc). */
  runtime: string;
}

export interface PostureVerdict {
  sandboxed: boolean;
  /** What is missing, one short phrase each (empty when sandboxed). */
  missing: string[];
}

/**
 * A call container on this posture is a sandbox only with everything the docker runner asks for in force.
 * gVisor's kernel reports no seccomp mode of its own (the sandbox is the filter), so seccomp is required of
 * runc only.
 */
export function judgePosture(p: MeasuredPosture): PostureVerdict {
  const missing: string[] = [];
  if (p.noNewPrivs !== 1) missing.push('no-new-privileges is off');
  if (p.runtime !== 'runsc' && p.seccomp !== 2) missing.push('no seccomp filter');
  if (!/^0+$/.test(p.capEff)) missing.push(`capabilities ${p.capEff} are effective`);
  if (p.uid === null || p.uid === 0) missing.push('runs as root');
  const nets = p.interfaces.filter((i) => i !== 'lo');
  if (nets.length > 0) missing.push(`has a network (${nets.join(', ')})`);
  if (!p.readOnlyRoot) missing.push('the root file system is writable');
  return { sandboxed: missing.length === 0, missing };
}

/** busybox sh, in capsule/busybox:1; one `key=value` line each. */
export const PROBE_SCRIPT = [
  'while read -r k v _; do case "$k" in CapEff:|NoNewPrivs:|Seccomp:) echo "${k%:}=$v" ;; esac; done </proc/self/status',
  'echo "uid=$(id -u)"',
  'for i in /sys/class/net/*; do [ -e "$i" ] && echo "if=${i##*/}"; done',
  'if touch /.capsule-probe 2>/dev/null; then echo rootfs=rw; else echo rootfs=ro; fi',
].join('\n');

export function parseProbeOutput(text: string, runtime: string): MeasuredPosture {
  const posture: MeasuredPosture = {
    capEff: '',
    noNewPrivs: null,
    seccomp: null,
    uid: null,
    interfaces: [],
    readOnlyRoot: false,
    runtime,
  };
  const num = (v: string): number | null => (/^\d+$/.test(v) ? Number(v) : null);
  for (const line of text.split('\n')) {
    const at = line.indexOf('=');
    if (at < 0) continue;
    const key = line.slice(0, at);
    const value = line.slice(at + 1).trim();
    if (key === 'CapEff') posture.capEff = value;
    else if (key === 'NoNewPrivs') posture.noNewPrivs = num(value);
    else if (key === 'Seccomp') posture.seccomp = num(value);
    else if (key === 'uid') posture.uid = num(value);
    else if (key === 'if') posture.interfaces.push(value);
    else if (key === 'rootfs') posture.readOnlyRoot = value === 'ro';
  }
  return posture;
}

export function probeCapability(runtime: string): Capability {
  const parsed = parseManifest(
    JSON.stringify({
      schemaVersion: 1,
      name: 'capsule-posture-probe',
      description: 'capsule measures what a call container gets on this engine.',
      environment: 'docker',
      entry: 'probe.sh',
      docker: { image: SANDBOX_IMAGES.busybox, runtime },
      limits: { timeoutMs: 10000, memoryMb: 32, outputBytes: 4096, pids: 16 },
    }),
  );
  if (!parsed.ok) throw new Error(`posture probe manifest: ${JSON.stringify(parsed.issues)}`);
  return {
    name: 'capsule-posture-probe',
    environment: 'docker',
    manifest: parsed.manifest,
    dir: '/nonexistent',
    manifestPath: 'capsule-posture-probe',
    entryPath: '/nonexistent/probe.sh',
    contentHash: 'sha256:posture-probe',
    root: '/nonexistent',
    fsGrants: [],
  };
}

/**
 * Run the probe in a container built by the same spec function as every call (only the command and the
 * capability mount differ) and read what it measured. `labels` mark it as capsule's (reaped like any call).
 */
export async function probePosture(
  engine: DockerEngine,
  options: {
    runtime: string;
    labels: Record<string, string>;
    /** Told the probe container's id once it exists. */
    onContainer?: ((id: string) => void) | undefined;
  },
): Promise<MeasuredPosture> {
  const spec = {
    ...buildContainerSpec(probeCapability(options.runtime), {
      capabilityFiles: { type: 'volume', volume: 'unused' },
      labels: { ...options.labels, [ROLE_LABEL]: 'posture' },
      hostEnv: {},
      cpus: 0.5,
    }),
    entrypoint: ['/bin/sh', '-c', PROBE_SCRIPT],
    cmd: [],
    mounts: [],
  };
  const id = await engine.createContainer(spec);
  options.onContainer?.(id);
  try {
    const stream = await engine.attach(id);
    const { OutputDemuxer } = await import('./demux.js');
    const demux = new OutputDemuxer(4096, () => {});
    const done = new Promise<void>((resolve, reject) => {
      stream.pipe(
        new Writable({
          write(chunk: Buffer, _enc, cb) {
            demux.push(chunk);
            cb();
          },
        }),
      );
      stream.once('end', resolve);
      stream.once('close', resolve);
      stream.once('error', reject);
    });
    stream.end();
    await engine.start(id);
    const code = await engine.wait(id);
    await done;
    if (code !== 0) throw new Error(`the posture probe exited ${code}: ${demux.stderr()}`);
    return parseProbeOutput(demux.stdout(), options.runtime);
  } finally {
    await engine.remove(id).catch(() => {});
  }
}
