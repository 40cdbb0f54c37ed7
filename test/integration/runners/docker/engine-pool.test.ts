import { execa } from 'execa';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CapsuleError } from '../../../../src/base/errors.js';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { EnginePool } from '../../../../src/runners/docker/engine-pool.js';
import { tempProject, writeCapability } from '../../../helpers/capability.js';
import { cli, REPO_ROOT } from '../../../helpers/cli.js';
import { tempCapability } from './helpers.js';
import { holdsWithin } from '../../../helpers/eventually.js';
import { permitFor } from '../../../helpers/permit.js';

// The engine pool on real engines: extra dockerd daemons in network namespaces of their own, started by
// scripts/extra-engines.sh (scripts/test.mjs runs it; the shared main engine is never touched).

const ENGINES_ROOT = process.env['CAPSULE_ENGINES_ROOT'] ?? '/var/lib/capsule-engines';

interface ExtraEngine {
  host: string;
  pidfile: string;
}

async function extraEngines(): Promise<Record<string, ExtraEngine>> {
  try {
    const index = JSON.parse(await readFile(path.join(ENGINES_ROOT, 'engines.json'), 'utf8')) as {
      engines: Record<string, ExtraEngine>;
    };
    return index.engines;
  } catch (err) {
    throw new Error(
      `these tests need the extra engines: run "bash scripts/extra-engines.sh up" as root first (${(err as Error).message})`,
    );
  }
}

/** Start whatever engine a test stopped (the script is idempotent); its own output when it fails. */
/**
 * Brings a killed engine back. A dockerd restarted right after a SIGKILL on a loaded machine can time out
 * waiting for its own containerd; `up` ends that attempt, so a second or third one starts clean.
 */
async function restartEngines(): Promise<void> {
  let failure = '';
  for (let attempt = 0; attempt < 3; attempt++) {
    const up = await execa('bash', [path.join(REPO_ROOT, 'scripts/extra-engines.sh'), 'up'], {
      reject: false,
    });
    if (up.exitCode === 0) return;
    failure = up.stderr;
  }
  throw new Error(`extra-engines.sh up failed three times: ${failure}`);
}

describe('engine pool on real engines', () => {
  let engines: Record<string, ExtraEngine>;
  const connect = (name: string): DockerodeEngine =>
    new DockerodeEngine({ host: engines[name]?.host ?? 'unix:///nonexistent' });
  const runningHere = async (name: string, capability: string): Promise<number> =>
    (
      await connect(name).listContainers([`capsule.pid=${process.pid}`, `capsule.capability=${capability}`])
    ).filter((c) => c.state === 'running').length;

  beforeAll(async () => {
    engines = await extraEngines();
  });

  afterAll(async () => {
    // An engine killed by a test comes back, and nothing of this process is left on any engine.
    await restartEngines();
    for (const name of Object.keys(engines)) {
      const engine = connect(name);
      for (const c of await engine.listContainers([`capsule.pid=${process.pid}`]).catch(() => []))
        await engine.remove(c.id).catch(() => {});
    }
  });

  /** A capability that runs until the file `go` appears in its (read-only, bind-mounted) folder. */
  async function gated(name: string): ReturnType<typeof tempCapability> {
    return tempCapability(
      name,
      { entry: 'run.sh', limits: { timeoutMs: 60_000 } },
      { 'run.sh': 'while [ ! -e /capability/go ]; do sleep 0.05; done\necho done\n' },
    );
  }

  it('schedules concurrent calls across both engines (least loaded) and every call returns its result', async () => {
    const t = await gated('pool-spread');
    const pool = new EnginePool([
      { name: 'pool-a', engine: connect('pool-a') },
      { name: 'pool-b', engine: connect('pool-b') },
    ]);
    try {
      const calls = [1, 2].map(() =>
        pool.run({ capability: t.capability, input: '{}' }, permitFor(t.capability)),
      );
      // Both engines run one of the calls at the same time: seen on each engine, from outside.
      expect(
        await holdsWithin(
          async () =>
            (await runningHere('pool-a', 'pool-spread')) === 1 &&
            (await runningHere('pool-b', 'pool-spread')) === 1,
          60_000,
        ),
      ).toBe(true);
      await writeFile(path.join(t.dir, 'go'), '');
      const results = await Promise.all(calls);
      for (const r of results) expect(r).toMatchObject({ exitCode: 0, stdout: 'done\n', timedOut: false });
    } finally {
      await pool.close();
      await t.cleanup();
    }
  });

  // The engines these two tests kill or stop are theirs alone (crash-a, crash-b): other test files use
  // pool-a and pool-b at the same time.
  it('an engine whose dockerd is killed mid-call: that call fails naming the engine (no hang), the pool goes on on the other', async () => {
    const t = await gated('pool-killed');
    const quick = await tempCapability('pool-after', { entry: 'run.sh' }, { 'run.sh': 'echo after\n' });
    const pool = new EnginePool([
      { name: 'crash-a', engine: connect('crash-a') },
      { name: 'crash-b', engine: connect('crash-b') },
    ]);
    try {
      const call = pool.run({ capability: t.capability, input: '{}' }, permitFor(t.capability));
      call.catch(() => undefined);
      let victim: string | undefined;
      expect(
        await holdsWithin(async () => {
          for (const name of ['crash-a', 'crash-b'])
            if ((await runningHere(name, 'pool-killed')) > 0) victim = name;
          return victim !== undefined;
        }, 60_000),
      ).toBe(true);
      const pid = Number(await readFile(engines[victim as string]?.pidfile ?? '', 'utf8'));
      process.kill(pid, 'SIGKILL');
      const err = await call.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(CapsuleError);
      expect((err as CapsuleError).details.engine).toBe(victim);
      expect((err as CapsuleError).message).toContain(`engine ${victim}`);
      // The next call lands on the engine that is still up.
      const r = await pool.run({ capability: quick.capability, input: '{}' }, permitFor(quick.capability));
      expect(r).toMatchObject({ exitCode: 0, stdout: 'after\n' });
      expect(pool.status().find((s) => s.name === victim)?.healthy).toBe(false);
    } finally {
      await pool.close();
      await t.cleanup();
      await quick.cleanup();
      await restartEngines();
    }
  }, 300_000);

  it('an engine that hangs mid-call (dockerd stopped, its socket still open): the call fails naming it instead of hanging', async () => {
    const t = await gated('pool-hung');
    const pool = new EnginePool([{ name: 'crash-b', engine: connect('crash-b') }]);
    const pid = Number(await readFile(engines['crash-b']?.pidfile ?? '', 'utf8'));
    try {
      const call = pool.run({ capability: t.capability, input: '{}' }, permitFor(t.capability));
      call.catch(() => undefined);
      expect(await holdsWithin(async () => (await runningHere('crash-b', 'pool-hung')) > 0, 60_000)).toBe(
        true,
      );
      process.kill(pid, 'SIGSTOP');
      const err = await call.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(CapsuleError);
      expect((err as CapsuleError).details.engine).toBe('crash-b');
      expect(pool.status()[0]?.healthy).toBe(false);
    } finally {
      process.kill(pid, 'SIGCONT');
      await pool.close();
      await t.cleanup();
    }
  });

  it('measures each engine’s posture from inside a call container: the weak engine lacks no-new-privileges and seccomp', async () => {
    const pool = new EnginePool([
      { name: 'pool-a', engine: connect('pool-a') },
      { name: 'weak', engine: connect('weak') },
    ]);
    try {
      const strong = await pool.posture('pool-a');
      expect(strong).toMatchObject({ noNewPrivs: 1, seccomp: 2, uid: 65534, readOnlyRoot: true });
      expect(strong.interfaces).toEqual(['lo']);
      expect(strong.capEff).toMatch(/^0+$/);
      const weak = await pool.posture('weak');
      expect(weak).toMatchObject({ noNewPrivs: 0, seccomp: 0 });
      const why = await pool.measureIsolation();
      expect(why).toContain('engine weak: no-new-privileges is off');
      expect(why).not.toContain('pool-a');
    } finally {
      await pool.close();
    }
  });

  it('a project-level grant does not run a docker capability on a weaker engine (the same grant runs it on a strong one)', async () => {
    const { root, capRoot } = await tempProject('capsule-pool-posture-');
    await writeCapability(
      capRoot,
      'posture-marker',
      { environment: 'docker', docker: { image: 'capsule/busybox:1' } },
      { 'run.sh': 'echo ran-here\n' },
    );
    // The engines are the person's own (CAPSULE_ENGINES): a repository's `engines` waits for a confirmation.
    const env = {
      ...process.env,
      XDG_STATE_HOME: path.join(root, '.state'),
      CAPSULE_ENGINES: JSON.stringify({
        strong: { type: 'docker', host: engines['pool-a']?.host },
        weak: { type: 'docker', host: engines['weak']?.host },
      }),
    };
    const shown = await cli(['show', 'posture-marker', '--json'], { cwd: root, env });
    const { contentHash } = JSON.parse(shown.stdout) as { contentHash: string };
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({
        schemaVersion: 1,
        allowlist: { 'run_capability:posture-marker': { level: 'AlwaysThisProject', contentHash } },
      }),
    );
    const onStrong = await cli(['run', 'posture-marker', '--no-prompt', '--engine', 'strong'], {
      cwd: root,
      env,
    });
    expect(onStrong).toMatchObject({ stdout: 'ran-here\n', code: 0 });
    const onWeak = await cli(['run', 'posture-marker', '--no-prompt', '--engine', 'weak'], {
      cwd: root,
      env,
    });
    expect(onWeak).toMatchObject({ stdout: '', code: 77 });
    // Both engines in the pool: the weakest one a call may land on decides.
    const both = await cli(['run', 'posture-marker', '--no-prompt'], { cwd: root, env });
    expect(both).toMatchObject({ stdout: '', code: 77 });
  });

  it('capsule engines --json: health, version, runtimes and the measured posture of each engine; 69 when one does not answer', async () => {
    const { root } = await tempProject('capsule-engines-cmd-');
    const env = {
      ...process.env,
      XDG_STATE_HOME: path.join(root, '.state'),
      CAPSULE_ENGINES: JSON.stringify({
        a: { type: 'docker', host: engines['pool-a']?.host },
        weak: { type: 'docker', host: engines['weak']?.host },
        gone: { type: 'docker', host: `unix://${root}/no-engine.sock` },
      }),
    };
    const r = await cli(['engines', '--json'], { cwd: root, env });
    expect(r.code).toBe(69);
    const rows = JSON.parse(r.stdout) as Array<{
      name: string;
      healthy: boolean;
      sandboxed?: boolean;
      runtimes?: string[];
      missing?: string[];
    }>;
    expect(rows.map((x) => [x.name, x.healthy, x.sandboxed])).toEqual([
      ['a', true, true],
      ['weak', true, false],
      ['gone', false, undefined],
    ]);
    expect(rows[0]?.runtimes).toContain('runc');
    expect(rows[1]?.missing).toEqual(['no-new-privileges is off', 'no seccomp filter']);
    // The probe containers are gone again.
    for (const name of ['pool-a', 'weak'])
      expect(await connect(name).listContainers([`capsule.role=posture`])).toEqual([]);
  });

  it('a swarm named in CAPSULE_ENGINES: capsule run --engine puts the call on it, capsule engines measures its nodes', async () => {
    const { root, capRoot } = await tempProject('capsule-pool-swarm-');
    await writeCapability(
      capRoot,
      'on-swarm',
      { environment: 'docker', docker: { image: 'capsule/busybox:1' } },
      { 'run.sh': 'echo "swarm got $(cat)"\n' },
    );
    const env = {
      ...process.env,
      XDG_STATE_HOME: path.join(root, '.state'),
      CAPSULE_ENGINES: JSON.stringify({ sw: { type: 'swarm', manager: engines['swarm-m']?.host } }),
    };
    const r = await cli(
      ['run', 'on-swarm', '--engine', 'sw', '--grant', 'run_capability:on-swarm', '--input', '{"x":1}'],
      { cwd: root, env },
    );
    expect(r).toMatchObject({ stdout: 'swarm got {"x":1}\n', code: 0 });
    const listed = await cli(['engines', '--json'], { cwd: root, env });
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout)).toMatchObject([
      { name: 'sw', type: 'swarm', healthy: true, sandboxed: true },
    ]);
    // Nothing of either command is left on the swarm.
    const manager = connect('swarm-m');
    expect(await manager.listServices(['capsule.managed=1'])).toEqual([]);
    expect(await manager.listConfigs(['capsule.managed=1'])).toEqual([]);
  });
});
