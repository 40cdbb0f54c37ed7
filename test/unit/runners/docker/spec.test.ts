import { describe, expect, it } from 'vitest';
import { manifestSchema } from '../../../../src/manifest/schema.js';
import type { Capability } from '../../../../src/manifest/types.js';
import {
  MOUNTED_TOOLS,
  isGated,
  parkedIdleMs,
  watchdogEntrypoint,
} from '../../../../src/runners/docker/call.js';
import { buildContainerSpec, containerCommand } from '../../../../src/runners/docker/spec.js';
import { specKey } from '../../../../src/runners/docker/runner.js';

function capability(extra: Record<string, unknown> = {}): Capability {
  const manifest = manifestSchema.parse({
    schemaVersion: 1,
    name: 'demo',
    description: 'x',
    environment: 'docker',
    entry: 'bin/run.sh',
    interpreter: 'sh',
    args: ['--flag'],
    docker: { image: 'capsule/busybox:1' },
    limits: { timeoutMs: 1000, memoryMb: 128, outputBytes: 100, pids: 16 },
    ...extra,
  });
  return {
    name: 'demo',
    environment: 'docker',
    manifest,
    dir: '/caps/demo',
    manifestPath: '/caps/demo/capability.json',
    entryPath: '/caps/demo/bin/run.sh',
    contentHash: 'sha256:0',
    root: '/caps',
    fsGrants: [],
  };
}

const base = {
  capabilityFiles: { type: 'bind', hostPath: '/caps/demo' } as const,
  labels: { 'capsule.managed': '1' },
  hostEnv: {},
  cpus: 1,
};

describe('buildContainerSpec', () => {
  it('is hardened by default', () => {
    const spec = buildContainerSpec(capability(), base);
    expect(spec).toMatchObject({
      user: '65534:65534',
      networkDisabled: true,
      networkMode: 'none',
      pidMode: '',
      ipcMode: 'private',
      privileged: false,
      readonlyRootfs: true,
      capDrop: ['ALL'],
      capAdd: [],
      securityOpt: ['no-new-privileges'],
      memoryBytes: 128 * 1024 * 1024,
      memorySwapBytes: 128 * 1024 * 1024,
      pidsLimit: 16,
      nanoCpus: 1e9,
      logDriver: 'none',
      openStdin: true,
      workingDir: '/capability',
      entrypoint: [],
    });
    expect(spec.tmpfs['/tmp']).toMatch(/noexec/);
    expect(spec.tmpfs['/tmp']).toMatch(/nosuid/);
    expect(spec.tmpfs['/tmp']).toMatch(/nodev/);
    expect(spec.ulimits.map((u) => u.name).sort()).toEqual(['fsize', 'nofile']);
    expect(spec.mounts).toEqual([
      { type: 'bind', source: '/caps/demo', target: '/capability', readOnly: true },
    ]);
  });

  it('runs interpreter + entry under /capability + args', () => {
    expect(containerCommand(capability())).toEqual(['/bin/sh', '/capability/bin/run.sh', '--flag']);
    expect(containerCommand(capability({ interpreter: undefined }))).toEqual([
      '/capability/bin/run.sh',
      '--flag',
    ]);
    expect(containerCommand(capability({ interpreter: 'node' }))[0]).toBe('node');
  });

  it('mounts each fs grant alone, ro or rw, under /project', () => {
    const c = capability();
    c.fsGrants = [
      { declared: 'data/in', hostPath: '/proj/data/in', mode: 'ro' },
      { declared: 'out', hostPath: '/proj/out', mode: 'rw' },
    ];
    expect(buildContainerSpec(c, base).mounts.slice(1)).toEqual([
      { type: 'bind', source: '/proj/data/in', target: '/project/data/in', readOnly: true },
      { type: 'bind', source: '/proj/out', target: '/project/out', readOnly: false },
    ]);
  });

  it('passes only granted environment variables that are set', () => {
    const spec = buildContainerSpec(capability({ grants: { env: ['A', 'MISSING'] } }), {
      ...base,
      hostEnv: { A: '1', B: '2' },
    });
    expect(spec.env).toContain('A=1');
    expect(spec.env.join(' ')).not.toMatch(/B=|MISSING/);
  });

  it('uses a volume for copied capability files', () => {
    const spec = buildContainerSpec(capability(), {
      ...base,
      capabilityFiles: { type: 'volume', volume: 'v1' },
    });
    expect(spec.mounts[0]).toEqual({ type: 'volume', source: 'v1', target: '/capability', readOnly: true });
  });

  it('carries manifest relaxations through (they are reported by dockerIsolation)', () => {
    const spec = buildContainerSpec(
      capability({
        docker: { image: 'capsule/busybox:1', privileged: true, pidMode: 'host', capAdd: ['NET_ADMIN'] },
      }),
      base,
    );
    expect(spec).toMatchObject({
      privileged: true,
      pidMode: 'host',
      capAdd: ['NET_ADMIN'],
      capDrop: ['ALL'],
    });
  });

  it('gives gVisor host threads on top of the guest pids limit', () => {
    expect(
      buildContainerSpec(capability({ docker: { image: 'capsule/busybox:1', runtime: 'runsc' } }), base)
        .pidsLimit,
    ).toBe(16 + 128);
  });

  it('puts the watchdog in front of the command when asked; parked (started ahead) only with an idle deadline', () => {
    expect(isGated(buildContainerSpec(capability(), base))).toBe(false);
    const running = buildContainerSpec(capability(), {
      ...base,
      watchdog: watchdogEntrypoint(2000, undefined),
    });
    expect(running.entrypoint?.slice(-3)).toEqual(['2.000', '0', '']);
    expect(isGated(running)).toBe(false);
    const gated = buildContainerSpec(capability(), { ...base, watchdog: watchdogEntrypoint(2000, 90_000) });
    expect(isGated(gated)).toBe(true);
    expect(parkedIdleMs(gated)).toBe(90_000);
    expect(gated.cmd).toEqual(['/bin/sh', '/capability/bin/run.sh', '--flag']);
  });

  it("an image that is not capsule's runs the watchdog from the tools volume, mounted read-only, never parked", () => {
    const spec = buildContainerSpec(capability({ docker: { image: 'example/tool:1' } }), {
      ...base,
      watchdog: watchdogEntrypoint(2000, undefined, MOUNTED_TOOLS),
      toolsVolume: 'capsule-tools',
    });
    expect(spec.entrypoint?.slice(0, 3)).toEqual(['/.capsule/busybox', 'sh', '-c']);
    expect(spec.entrypoint?.slice(-3)).toEqual(['2.000', '0', '/.capsule/busybox']);
    expect(spec.mounts).toContainEqual({
      type: 'volume',
      source: 'capsule-tools',
      target: '/.capsule',
      readOnly: true,
    });
    expect(isGated(spec)).toBe(false);
    // The hardening does not change with the watchdog.
    expect(spec).toMatchObject({ readonlyRootfs: true, capDrop: ['ALL'], user: '65534:65534' });
  });

  it('same configuration, same pool key; any difference, another key', () => {
    expect(specKey(buildContainerSpec(capability(), base))).toBe(
      specKey(buildContainerSpec(capability(), base)),
    );
    expect(specKey(buildContainerSpec(capability({ limits: { memoryMb: 64 } }), base))).not.toBe(
      specKey(buildContainerSpec(capability(), base)),
    );
  });
});
