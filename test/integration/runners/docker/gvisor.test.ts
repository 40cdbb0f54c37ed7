import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import type { Capability } from '../../../../src/manifest/types.js';
import { settlesWithin } from '../../../helpers/eventually.js';
import { fixture, tempCapability } from './helpers.js';
import { permitFor, withPermit } from '../../../helpers/permit.js';

// gVisor is optional: these run when the engine has the runsc runtime (CAPSULE_GVISOR=1 scripts/provision-docker.sh).
const engine = new DockerodeEngine({ env: process.env });
const hasRunsc = await engine
  .info()
  .then((i) => i.runtimes.includes('runsc'))
  .catch(() => false);

function underGvisor(c: Capability): Capability {
  const docker = c.manifest.docker;
  if (docker === undefined) throw new Error('not docker');
  return { ...c, manifest: { ...c.manifest, docker: { ...docker, runtime: 'runsc' } } };
}

describe('docker runner on gVisor (runsc)', () => {
  it('has gVisor registered with the engine (scripts/provision-docker.sh installs runsc)', () => {
    expect(hasRunsc).toBe(true);
  });

  const runner = new DockerRunner({ env: process.env, engine, prewarm: 0 });
  const cleanups: Array<() => Promise<void>> = [];

  afterAll(async () => {
    await runner.close();
    await Promise.all(cleanups.map((c) => c()));
    expect(await engine.listContainers([`capsule.pid=${process.pid}`])).toEqual([]);
  });

  it('really runs under the gVisor kernel, with input, output and exit code', async () => {
    const t = await tempCapability(
      'gvisor-hello',
      { entry: 'run.sh', docker: { image: 'capsule/busybox:1', runtime: 'runsc' } },
      { 'run.sh': 'cat; echo; dmesg | head -1; exit 3\n' },
    );
    cleanups.push(t.cleanup);
    const result = await runner.run({ capability: t.capability, input: '{"x":1}' }, permitFor(t.capability));
    expect(result.exitCode).toBe(3);
    expect(result.stdout).toMatch(/^\{"x":1\}\n.*Starting gVisor/);
    expect(runner.isolation(t.capability).summary).toMatch(/gVisor/);
  });

  it('the network and write attacks fail the same way', async () => {
    let connections = 0;
    const server = createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as AddressInfo).port;
      const net = await runner.run(
        ...withPermit({
          capability: underGvisor(await fixture('net-escape')),
          input: JSON.stringify({ port }),
        }),
      );
      expect(net.stdout).toMatch(/host_loopback_port=failed/);
      expect(net.stdout).toMatch(/outside=failed/);
      expect(connections).toBe(0);
      const write = await runner.run(
        ...withPermit({ capability: underGvisor(await fixture('write-escape')), input: '{}' }),
      );
      expect(write.stdout).toContain('root=denied');
      expect(write.stdout).toContain('capability=denied');
      expect(write.stdout).toContain('tmp=written');
    } finally {
      server.close();
    }
  });

  it('a fork bomb stays inside the sandbox and ends at the pids limit, the timeout or its own starvation', async () => {
    const capability = underGvisor(await fixture('fork-bomb'));
    // It ends at all (a bomb left alone never does): by the pids limit, the deadline or starvation.
    const result = await settlesWithin(
      runner.run({ capability, input: '{}' }, permitFor(capability)),
      90_000,
      'the fork bomb to end',
    );
    expect(
      result.pidsLimited === true ||
        result.timedOut ||
        result.oomKilled ||
        (result.exitCode !== null && result.exitCode !== 0),
    ).toBe(true);
  });

  it('a timeout still kills it', async () => {
    const capability = underGvisor(await fixture('sleeper'));
    // The script never ends by itself: that the run ends at all, at the deadline, is the effect.
    const result = await settlesWithin(
      runner.run({ capability, input: '{}' }, permitFor(capability)),
      90_000,
      'the sleeper to be killed',
    );
    expect(result.timedOut).toBe(true);
  });
});
