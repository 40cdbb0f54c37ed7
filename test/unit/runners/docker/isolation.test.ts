import { describe, expect, it } from 'vitest';
import { manifestSchema } from '../../../../src/manifest/schema.js';
import type { Capability, ResolvedFsGrant } from '../../../../src/manifest/types.js';
import { dockerIsolation } from '../../../../src/runners/docker/isolation.js';

function cap(
  docker: Record<string, unknown> = {},
  extra: Record<string, unknown> = {},
  fsGrants: ResolvedFsGrant[] = [],
): Pick<Capability, 'manifest' | 'fsGrants'> {
  const manifest = manifestSchema.parse({
    schemaVersion: 1,
    name: 'x',
    description: 'x',
    environment: 'docker',
    entry: 'run.sh',
    docker: { image: 'capsule/busybox:1', ...docker },
    ...extra,
  });
  return { manifest, fsGrants };
}

describe('dockerIsolation', () => {
  it('says which mode runs: a fresh container per call, or reset-reusable for docker.reusable', () => {
    const fresh = dockerIsolation(cap());
    expect(fresh.mode).toBe('fresh-container');
    expect(fresh.summary).toMatch(/a fresh container per call$/);
    const reused = dockerIsolation(cap({ reusable: true }));
    expect(reused).toMatchObject({ mode: 'reset-reusable', sandboxed: true });
    expect(reused.summary).toMatch(/reset-reusable: .*reset and verified between them/);
  });

  it.each([[{ pidMode: 'host' }], [{ ipcMode: 'host' }], [{ runtime: 'runsc' }]])(
    "reusable with %j gets fresh containers: the reset needs the container's own namespaces",
    (docker) => {
      const r = dockerIsolation(cap({ reusable: true, ...docker }));
      expect(r.mode).toBe('fresh-container');
      expect(r.summary).toMatch(/a fresh container per call$/);
    },
  );

  it('the default profile is sandboxed, and says what it is', () => {
    const r = dockerIsolation(cap());
    expect(r).toMatchObject({ sandboxed: true, reasons: [], refusals: [] });
    expect(r.summary).toMatch(/hardened: no network, read-only rootfs/);
  });

  it.each([
    [{ privileged: true }, /privileged/],
    [{ network: 'host' }, /host networking/],
    [{ pidMode: 'host' }, /host PID/],
    [{ ipcMode: 'host' }, /host IPC/],
    [{ capAdd: ['NET_ADMIN'] }, /NET_ADMIN/],
  ])('%j is not sandboxed', (docker, reason) => {
    const r = dockerIsolation(cap(docker));
    expect(r.sandboxed).toBe(false);
    expect(r.reasons.join('; ')).toMatch(reason);
    expect(r.summary).toMatch(/NOT sandboxed/);
  });

  it('lists every reason at once', () => {
    const r = dockerIsolation(cap({ privileged: true, pidMode: 'host', capAdd: ['SYS_ADMIN'] }));
    expect(r.reasons).toHaveLength(3);
  });

  it('a writable host mount is not sandboxed; a read-only one is', () => {
    expect(
      dockerIsolation(cap({}, {}, [{ declared: 'data', hostPath: '/p/data', mode: 'ro' }])).sandboxed,
    ).toBe(true);
    const rw = dockerIsolation(cap({}, {}, [{ declared: 'out', hostPath: '/p/out', mode: 'rw' }]));
    expect(rw.sandboxed).toBe(false);
    expect(rw.reasons[0]).toMatch(/writable host mount grants.fs\[0\] out/);
  });

  it('the Docker socket (or a folder that holds it) is not sandboxed and refused, even read-only', () => {
    for (const hostPath of ['/var/run/docker.sock', '/p/run/docker.sock', '/var/run', '/run', '/']) {
      const r = dockerIsolation(cap({}, {}, [{ declared: 'sock', hostPath, mode: 'ro' }]));
      expect(r.sandboxed, hostPath).toBe(false);
      expect(r.refusals[0]?.field).toBe('grants.fs[0].path');
    }
  });

  it('host networking is refused; a network grant runs sandboxed, with its hosts in the summary, in a fresh container', () => {
    expect(dockerIsolation(cap({ network: 'host' })).refusals.map((x) => x.field)).toEqual([
      'docker.network',
    ]);
    const granted = dockerIsolation(
      cap({ reusable: true }, { grants: { network: [{ host: 'api.example.com', ports: [443] }] } }),
    );
    expect(granted.refusals).toEqual([]);
    expect(granted.sandboxed).toBe(true);
    expect(granted.summary).toMatch(/egress proxy to api\.example\.com:443/);
    // Its proxy socket belongs to one run: never a container shared between calls.
    expect(granted.mode).toBe('fresh-container');
  });

  it('privileged and friends run (ceiling drops to the session) rather than being refused', () => {
    expect(dockerIsolation(cap({ privileged: true, capAdd: ['SYS_ADMIN'] })).refusals).toEqual([]);
  });

  it('names gVisor when selected', () => {
    expect(dockerIsolation(cap({ runtime: 'runsc' })).summary).toMatch(/gVisor/);
  });
});
