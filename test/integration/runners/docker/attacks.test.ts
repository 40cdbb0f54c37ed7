import { spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import type { AddressInfo, Server } from 'node:net';
import { chmod, cp, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import { settlesWithin } from '../../../helpers/eventually.js';
import { capabilityFrom, dockerForTests, fixture, FIXTURES } from './helpers.js';
import { permitFor, withPermit } from '../../../helpers/permit.js';
import { writeCapability } from '../../../helpers/capability.js';

// Each hostile capability runs in the real engine; every test asserts the attack failed inside the
// container AND that the host saw nothing (listener untouched, files unchanged, capsule still responsive).
describe('docker runner against hostile capabilities', () => {
  let engine: DockerodeEngine;
  let runner: DockerRunner;
  const mine = `capsule.pid=${process.pid}`;

  beforeAll(async () => {
    ({ engine } = await dockerForTests());
    runner = new DockerRunner({ env: process.env, engine, prewarm: 0 });
  });

  afterAll(async () => {
    await runner.close();
    expect(await engine.listContainers([mine])).toEqual([]);
  });

  it('network: cannot reach a listener on the host loopback, nor anything else; the listener gets nothing', async () => {
    let connections = 0;
    const server: Server = createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const result = await runner.run(
        ...withPermit({
          capability: await fixture('net-escape'),
          input: JSON.stringify({ port }),
        }),
      );
      expect(result.exitCode).toBe(0);
      expect(result.stdout).toMatch(/host_loopback_port=failed/);
      expect(result.stdout).toMatch(/localhost_port=failed/);
      expect(result.stdout).toMatch(/outside=failed/);
      // Only the container's own loopback exists, and there is no route anywhere.
      expect(result.stdout).toMatch(/interfaces=lo \n/);
      expect(result.stdout).toMatch(/routes=0/);
      expect(connections).toBe(0);
    } finally {
      server.close();
    }
  });

  it('writes: the root filesystem and the capability folder are read-only; only the tmpfs is writable', async () => {
    // A world-writable copy of the fixture: file modes would let uid 65534 write, so only the read-only
    // mount can stop it.
    const parent = await mkdtemp(path.join(tmpdir(), 'capsule-write-escape-'));
    const dir = path.join(parent, 'write-escape');
    try {
      await cp(path.join(FIXTURES, 'write-escape'), dir, { recursive: true });
      await chmod(dir, 0o777);
      await chmod(path.join(dir, 'run.sh'), 0o666);
      const capability = await capabilityFrom(dir);
      const before = await readdir(capability.dir);
      const entryBefore = await readFile(path.join(capability.dir, 'run.sh'), 'utf8');
      const result = await runner.run({ capability, input: '{}' }, permitFor(capability));
      expect(result.stdout).toContain('root=denied');
      expect(result.stdout).toContain('etc=denied');
      expect(result.stdout).toContain('capability=denied');
      expect(result.stdout).toContain('capability_entry=denied');
      expect(result.stdout).toContain('mkdir=denied');
      expect(result.stdout).toContain('tmp=written');
      expect(await readdir(capability.dir)).toEqual(before);
      expect(await readFile(path.join(capability.dir, 'run.sh'), 'utf8')).toBe(entryBefore);
    } finally {
      await rm(parent, { recursive: true, force: true });
    }
  });

  it('exec from tmpfs is refused; runs as nobody with no effective capabilities', async () => {
    const result = await runner.run(...withPermit({ capability: await fixture('tmp-exec'), input: '{}' }));
    expect(result.stdout).toContain('copied=yes');
    expect(result.stdout).toContain('exec=denied');
    expect(result.stdout).toContain('script=denied');
    expect(result.stdout).toContain('whoami=65534:65534');
    expect(result.stdout).toMatch(/CapEff:\s+0000000000000000/);
  });

  it('privilege escalation: remounts, device nodes, namespaces, chroot, raw sockets and setuid all fail', async () => {
    const result = await runner.run(...withPermit({ capability: await fixture('privesc'), input: '{}' }));
    const attempts = result.stdout.split('\n').filter((l) => /^[a-z_]+=(denied|succeeded)$/.test(l));
    expect(attempts).toHaveLength(10);
    for (const line of attempts) expect(line).toMatch(/=denied$/);
    // Its own PID namespace: pid 1 is capsule's watchdog (the capability is its child), and only a handful
    // of processes exist.
    expect(result.stdout).toMatch(
      /pid1=\/bin\/sh -c [\s\S]* capsule-watchdog [\d.]+ [\d.]+ +\/bin\/sh \/capability\/run.sh/,
    );
    expect(Number(/processes=(\d+)/.exec(result.stdout)?.[1])).toBeLessThan(10);
  });

  it('fork bomb: stopped at the pids limit and reported (not at the timeout), capsule unaffected', async () => {
    const capability = await fixture('fork-bomb');
    const result = await runner.run({ capability, input: '{}' }, permitFor(capability));
    // The first fork the limit refused stopped the run, as in the shell runner: the kernel's counter said so.
    expect(result).toMatchObject({ pidsLimited: true, timedOut: false, exitCode: null, signal: 'SIGKILL' });
    // However far its counting loop got before it was stopped, it never got past the limit (500 attempts).
    const spawned = Number(/spawned=(\d+)/.exec(result.stdout)?.[1] ?? 0);
    expect(spawned).toBeLessThanOrEqual(capability.manifest.limits.pids);
    // The host can still fork.
    expect(spawnSync('true').status).toBe(0);
  });

  it('memory hog: OOM-killed and reported; the next call runs normally', async () => {
    const result = await runner.run(...withPermit({ capability: await fixture('memory-hog'), input: '{}' }));
    expect(result.oomKilled).toBe(true);
    expect(result.exitCode).toBeNull();
    expect(result.signal).toBe('SIGKILL');
    expect(result.timedOut).toBe(false);
    const after = await runner.run(...withPermit({ capability: await fixture('write-escape'), input: '{}' }));
    expect(after.exitCode).toBe(0);
  });

  it('output flood: cut at outputBytes on both streams, the container killed', async () => {
    const capability = await fixture('output-flood');
    const result = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(result.truncated).toBe(true);
    expect(result.timedOut).toBe(false);
    expect(result.signal).toBe('SIGKILL');
    expect(Buffer.byteLength(result.stdout)).toBe(capability.manifest.limits.outputBytes);
    expect(Buffer.byteLength(result.stderr)).toBeLessThanOrEqual(capability.manifest.limits.outputBytes);
    // What is kept is bounded by the cap above; how fast and in how much memory is the bench's (bench/).
  });

  it('sleep past the timeout while ignoring SIGTERM: killed on time', async () => {
    const capability = await fixture('sleeper');
    // The script never ends by itself: that the run ends at all, killed by the deadline, is the effect.
    const result = await settlesWithin(
      runner.run({ capability, input: '{}' }, permitFor(capability)),
      90_000,
      'the sleeper to be killed',
    );
    expect(result.timedOut).toBe(true);
    expect(result.exitCode).toBeNull();
    expect(result.signal).toBe('SIGKILL');
    expect(result.stdout).toBe('sleeping\n');
    expect(result.durationMs).toBeGreaterThanOrEqual(capability.manifest.limits.timeoutMs);
  });

  it('symlinks in the capability folder do not reach host files', async () => {
    const secretDir = await mkdtemp(path.join(tmpdir(), 'capsule-secret-'));
    const capDir = await mkdtemp(path.join(tmpdir(), 'capsule-symlink-cap-'));
    const folder = path.join(capDir, 'symlink-escape');
    try {
      const secret = path.join(secretDir, 'secret.txt');
      await writeFile(secret, 'TOP-SECRET-HOST-DATA');
      await writeCapability(capDir, 'symlink-escape', {
        description: 'Hostile: symlinks to host files',
        environment: 'docker',
        docker: { image: 'capsule/busybox:1' },
      });
      await writeFile(
        path.join(folder, 'run.sh'),
        'for f in abs rel dir/secret.txt; do cat "/capability/$f" 2>&1; echo; done\n',
      );
      await symlink(secret, path.join(folder, 'abs'));
      await symlink(path.relative(folder, secret), path.join(folder, 'rel'));
      await symlink(secretDir, path.join(folder, 'dir'));
      // The loader would refuse this folder; the runner must be safe even when handed it.
      const result = await runner.run(
        ...withPermit({ capability: await capabilityFrom(folder), input: '{}' }),
      );
      expect(result.stdout).not.toContain('TOP-SECRET');
      expect(result.stdout).toMatch(/No such file or directory/);
    } finally {
      await rm(secretDir, { recursive: true, force: true });
      await rm(capDir, { recursive: true, force: true });
    }
  });

  it('host networking, and network grants on an engine that cannot see host paths, are refused before anything runs', async () => {
    let created = 0;
    // Count creations through a wrapped engine: a refused capability must not reach the engine at all.
    const counting = new Proxy(engine, {
      get(target, prop, receiver) {
        if (prop === 'createContainer') {
          return (...args: Parameters<DockerodeEngine['createContainer']>) => {
            created++;
            return target.createContainer(...args);
          };
        }
        const value: unknown = Reflect.get(target, prop, receiver);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    // copy mode stands for a remote engine: the egress proxy socket cannot be mounted into it.
    const refusing = new DockerRunner({ env: process.env, engine: counting, capabilityFiles: 'copy' });
    await expect(
      refusing.run(...withPermit({ capability: await fixture('network-grant'), input: '{}' })),
    ).rejects.toMatchObject({
      code: 'UNSUPPORTED',
      details: { field: 'grants.network', file: path.join(FIXTURES, 'network-grant', 'capability.json') },
    });
    await expect(
      refusing.run(...withPermit({ capability: await fixture('host-network'), input: '{}' })),
    ).rejects.toMatchObject({
      code: 'UNSUPPORTED',
      details: { field: 'docker.network' },
    });
    await refusing.close();
    expect(created).toBe(0);
  });

  it('the Docker socket (or any socket) granted as a file is refused before anything runs', async () => {
    const project = await mkdtemp(path.join(tmpdir(), 'capsule-sock-'));
    const servers: Server[] = [];
    try {
      const listen = async (file: string): Promise<void> => {
        const server = createServer(() => {});
        servers.push(server);
        await new Promise<void>((resolve) => server.listen(file, resolve));
      };
      await listen(path.join(project, 'docker.sock'));
      await listen(path.join(project, 'other.sock'));
      for (const [name, field] of [
        ['docker.sock', 'grants.fs[0].path'],
        ['other.sock', 'grants.fs[0].path'],
      ] as const) {
        const capability = await fixture('write-escape');
        capability.fsGrants = [{ declared: name, hostPath: path.join(project, name), mode: 'ro' }];
        await expect(runner.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
          code: 'UNSUPPORTED',
          details: { field },
        });
      }
      const named = await fixture('write-escape');
      named.fsGrants = [{ declared: 'docker.sock', hostPath: path.join(project, 'docker.sock'), mode: 'ro' }];
      expect(runner.isolation(named).sandboxed).toBe(false);
    } finally {
      for (const s of servers) s.close();
      await rm(project, { recursive: true, force: true });
    }
  });

  it('privileged / host pid / cap-add: runs, but the isolation report says NOT sandboxed with every reason', async () => {
    const capability = await fixture('privileged');
    const report = runner.isolation(capability);
    expect(report.sandboxed).toBe(false);
    expect(report.reasons.join('\n')).toMatch(/privileged/);
    expect(report.reasons.join('\n')).toMatch(/PID/);
    expect(report.reasons.join('\n')).toMatch(/IPC/);
    expect(report.reasons.join('\n')).toMatch(/SYS_ADMIN/);
    expect(report.summary).toMatch(/NOT sandboxed/);
    // The report is not theoretical: privileged really sees the host's devices (a hardened container sees ~15).
    const result = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(Number(result.stdout.trim())).toBeGreaterThan(20);
  });
});
