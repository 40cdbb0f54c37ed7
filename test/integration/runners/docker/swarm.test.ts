import { readFile, symlink } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CapsuleError } from '../../../../src/base/errors.js';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { judgePosture, parseProbeOutput, PROBE_SCRIPT } from '../../../../src/runners/docker/posture.js';
import { SwarmRunner } from '../../../../src/runners/docker/swarm-runner.js';
import { tempCapability } from './helpers.js';
import { holdsWithin } from '../../../helpers/eventually.js';
import { permitFor } from '../../../helpers/permit.js';

// The Swarm runner on a real two-node swarm (manager + worker over a veth pair between network namespaces of
// their own), started by scripts/extra-engines.sh; the shared main engine is never touched.

const ENGINES_ROOT = process.env['CAPSULE_ENGINES_ROOT'] ?? '/var/lib/capsule-engines';

describe('swarm runner on a real two-node swarm', () => {
  let manager: DockerodeEngine;
  let worker: DockerodeEngine;
  let runner: SwarmRunner;
  /** Containers of this process's calls on either node (swarm tasks carry the service's labels). */
  const containers = async (state?: string): Promise<number> => {
    let n = 0;
    for (const e of [manager, worker]) {
      const list = await e.listContainers([`capsule.pid=${process.pid}`]);
      n += list.filter((c) => state === undefined || c.state === state).length;
    }
    return n;
  };

  beforeAll(async () => {
    let index: { engines: Record<string, { host: string }> };
    try {
      index = JSON.parse(await readFile(path.join(ENGINES_ROOT, 'engines.json'), 'utf8')) as typeof index;
    } catch (err) {
      throw new Error(`run "bash scripts/extra-engines.sh up" as root first (${(err as Error).message})`);
    }
    manager = new DockerodeEngine({ host: index.engines['swarm-m']?.host as string });
    worker = new DockerodeEngine({ host: index.engines['swarm-w']?.host as string });
    runner = new SwarmRunner({ manager });
    expect(await runner.available()).toEqual({ ok: true });
  });

  afterAll(async () => {
    await runner.close();
    await runner.reap();
  });

  it('runs a call end to end: input through a config as stdin, output from the log, the exit code from the task', async () => {
    const t = await tempCapability(
      'swarm-echo',
      { entry: 'run.sh' },
      { 'run.sh': 'read -r line; echo "got $line"; echo "uid $(id -u)" >&2; exit 3\n' },
    );
    try {
      const r = await runner.run({ capability: t.capability, input: '{"a":1}' }, permitFor(t.capability));
      expect(r).toMatchObject({
        exitCode: 3,
        stdout: 'got {"a":1}\n',
        stderr: 'uid 65534\n',
        timedOut: false,
      });
    } finally {
      await t.cleanup();
    }
  });

  it('the hardening a task gets, measured from inside it by the posture probe', async () => {
    const t = await tempCapability('swarm-posture', { entry: 'run.sh' }, { 'run.sh': `${PROBE_SCRIPT}\n` });
    try {
      const r = await runner.run({ capability: t.capability, input: '{}' }, permitFor(t.capability));
      expect(r.exitCode).toBe(0);
      const posture = parseProbeOutput(r.stdout, 'runc');
      // no-new-privileges comes from the node daemon (--no-new-privileges): a service cannot ask for it.
      expect(posture).toMatchObject({ noNewPrivs: 1, seccomp: 2, uid: 65534, readOnlyRoot: true });
      expect(posture.capEff).toMatch(/^0+$/);
      expect(judgePosture(posture)).toEqual({ sandboxed: true, missing: [] });
    } finally {
      await t.cleanup();
    }
  });

  it('measures the posture on each node of the swarm (a service pinned to each): both nodes give everything', async () => {
    expect((await manager.nodes()).filter((n) => n.state === 'ready')).toHaveLength(2);
    expect(await runner.measureIsolation()).toBeUndefined();
  });

  it('an empty input is an empty stdin (a Swarm config cannot be empty)', async () => {
    const t = await tempCapability('swarm-empty', { entry: 'run.sh' }, { 'run.sh': 'echo "[$(cat)]"\n' });
    try {
      expect(
        await runner.run({ capability: t.capability, input: '' }, permitFor(t.capability)),
      ).toMatchObject({
        exitCode: 0,
        stdout: '[]\n',
      });
    } finally {
      await t.cleanup();
    }
  });

  it('a task killed by SIGKILL reports 137 (the capability runs under init)', async () => {
    const t = await tempCapability(
      'swarm-killed',
      { entry: 'run.sh' },
      { 'run.sh': 'echo before\nkill -KILL $$\n' },
    );
    try {
      const r = await runner.run({ capability: t.capability, input: '{}' }, permitFor(t.capability));
      expect(r).toMatchObject({ exitCode: 137, stdout: 'before\n' });
    } finally {
      await t.cleanup();
    }
  });

  it('attack: a symlink in the capability folder (to a host secret) is never shipped to the swarm', async () => {
    const t = await tempCapability(
      'swarm-link',
      { entry: 'run.sh' },
      { 'run.sh': 'cat /capability/secret\n' },
    );
    await symlink('/etc/shadow', path.join(t.dir, 'secret'));
    try {
      const err = await runner.run({ capability: t.capability, input: '{}' }, permitFor(t.capability)).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(CapsuleError);
      expect((err as CapsuleError).code).toBe('UNSUPPORTED');
      // Nothing of the call reached the manager: no config (that would hold the file), no service.
      const mine = ['capsule.managed=1', `capsule.pid=${process.pid}`];
      expect(await manager.listConfigs(mine)).toEqual([]);
      expect(await manager.listServices(mine)).toEqual([]);
    } finally {
      await t.cleanup();
    }
  });

  it('an output flood comes back cut at outputBytes, marked truncated', async () => {
    const t = await tempCapability(
      'swarm-flood',
      { entry: 'run.sh', limits: { outputBytes: 4096 } },
      { 'run.sh': 'yes flood | head -c 3000000\n' },
    );
    try {
      const r = await runner.run({ capability: t.capability, input: '{}' }, permitFor(t.capability));
      expect(r.truncated).toBe(true);
      expect(Buffer.byteLength(r.stdout)).toBe(4096);
    } finally {
      await t.cleanup();
    }
  });

  it('a timeout removes the service and the task’s process really stops', async () => {
    const t = await tempCapability(
      'swarm-forever',
      { entry: 'run.sh', limits: { timeoutMs: 3000 } },
      { 'run.sh': "trap '' TERM HUP INT\nwhile :; do sleep 1; done\n" },
    );
    try {
      const call = runner.run({ capability: t.capability, input: '{}' }, permitFor(t.capability));
      expect(await holdsWithin(async () => (await containers('running')) > 0, 60_000)).toBe(true);
      const r = await call;
      expect(r).toMatchObject({ timedOut: true, exitCode: null });
      expect(await holdsWithin(async () => (await containers('running')) === 0, 30_000)).toBe(true);
    } finally {
      await t.cleanup();
    }
  });

  it('cancel removes the service and stops the task', async () => {
    const t = await tempCapability(
      'swarm-cancel',
      { entry: 'run.sh', limits: { timeoutMs: 60_000 } },
      { 'run.sh': 'while :; do sleep 1; done\n' },
    );
    const abort = new AbortController();
    try {
      const call = runner.run(
        { capability: t.capability, input: '{}', signal: abort.signal },
        permitFor(t.capability),
      );
      expect(await holdsWithin(async () => (await containers('running')) > 0, 60_000)).toBe(true);
      abort.abort();
      expect(await call).toMatchObject({ canceled: true, exitCode: null });
      expect(await holdsWithin(async () => (await containers('running')) === 0, 30_000)).toBe(true);
    } finally {
      await t.cleanup();
    }
  });

  it('leaves no service, config or container behind', async () => {
    const t = await tempCapability('swarm-clean', { entry: 'run.sh' }, { 'run.sh': 'echo ok\n' });
    try {
      expect(
        await runner.run({ capability: t.capability, input: '{}' }, permitFor(t.capability)),
      ).toMatchObject({ exitCode: 0 });
      const mine = ['capsule.managed=1', `capsule.pid=${process.pid}`];
      expect(await manager.listServices(mine)).toEqual([]);
      expect(await manager.listConfigs(mine)).toEqual([]);
      expect(await holdsWithin(async () => (await containers()) === 0, 30_000)).toBe(true);
    } finally {
      await t.cleanup();
    }
  });
});
