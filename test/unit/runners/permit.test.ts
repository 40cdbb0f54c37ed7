import { describe, expect, it } from 'vitest';
import { isCapsuleError } from '../../../src/base/errors.js';
import { manifestSchema } from '../../../src/manifest/schema.js';
import type { Capability } from '../../../src/manifest/types.js';
import type { DockerEngine, SwarmApi } from '../../../src/runners/docker/engine.js';
import { EnginePool } from '../../../src/runners/docker/engine-pool.js';
import { DockerRunner } from '../../../src/runners/docker/runner.js';
import { SwarmRunner } from '../../../src/runners/docker/swarm-runner.js';
import type { HostProcesses } from '../../../src/runners/host/host-processes.js';
import { LazyRunner } from '../../../src/runners/lazy-runner.js';
import { assertPermit, redeemPermit, type RunnerPermit } from '../../../src/runners/permit.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import type { Runner } from '../../../src/runners/types.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import { permitFor } from '../../helpers/permit.js';

// Every runner's run() refuses what its permit does not allow before it reaches anything: no engine call,
// no process, no module load. Counted by fakes standing where the outside world would be.

function capability(name: string, environment: 'shell' | 'wasm' | 'docker'): Capability {
  return {
    name,
    environment,
    manifest: manifestSchema.parse({
      schemaVersion: 1,
      name,
      description: name,
      environment,
      entry: environment === 'wasm' ? 'run.wasm' : 'run.sh',
      ...(environment === 'shell' ? { interpreter: 'sh' } : {}),
      ...(environment === 'docker' ? { docker: { image: 'capsule/busybox:1' } } : {}),
    }),
    dir: `/nonexistent/${name}`,
    manifestPath: `/nonexistent/${name}/capability.json`,
    entryPath: `/nonexistent/${name}/run.sh`,
    contentHash: `sha256:${name}`,
    root: '/nonexistent',
    fsGrants: [],
  };
}

/** An engine (and swarm manager) that counts every call made on it and answers none. */
function countingEngine(): { engine: DockerEngine & SwarmApi; calls: string[] } {
  const calls: string[] = [];
  const engine = new Proxy({} as DockerEngine & SwarmApi, {
    get: (_t, prop) =>
      prop === 'then'
        ? undefined
        : (..._args: unknown[]) => {
            calls.push(String(prop));
            const answer = Promise.reject(new Error(`engine ${String(prop)}: not answering`));
            // Calls the runner does not wait for (a pin, a disconnect) must not fail the file.
            answer.catch(() => undefined);
            return answer;
          },
  });
  return { engine, calls };
}

interface Subject {
  runner: Runner;
  /**
   * What the runner reached outside itself (engine calls, processes, module loads); undefined where a genuine
   * permit's run stops before anything a fake can count (the Wasm runner's worker, the swarm's files).
   */
  reached: () => number | undefined;
}

const subjects: Array<{ runner: string; environment: 'shell' | 'wasm' | 'docker'; make: () => Subject }> = [
  {
    runner: 'ShellRunner',
    environment: 'shell',
    make: () => {
      let runs = 0;
      const processes = {
        run: () => {
          runs++;
          return Promise.reject(new Error('not started'));
        },
        close: async () => {},
      } as unknown as HostProcesses;
      return { runner: new ShellRunner({ hostProcesses: processes }), reached: () => runs };
    },
  },
  {
    runner: 'WasmRunner',
    environment: 'wasm',
    // A worker would be refused by the unit setup (no spawn): the refusal must come before one is needed.
    make: () => ({ runner: new WasmRunner({ poolSize: 1 }), reached: () => undefined }),
  },
  {
    runner: 'DockerRunner',
    environment: 'docker',
    make: () => {
      const { engine, calls } = countingEngine();
      return {
        runner: new DockerRunner({ env: {}, engine, engineTimeoutMs: 200, prewarm: 0, prestart: false }),
        reached: () => calls.length,
      };
    },
  },
  {
    runner: 'SwarmRunner',
    environment: 'docker',
    make: () => {
      const { engine, calls } = countingEngine();
      // Its call reads the capability's files before the manager: a genuine run stops there.
      return {
        runner: new SwarmRunner({ manager: engine }),
        reached: () => (calls.length === 0 ? undefined : calls.length),
      };
    },
  },
  {
    runner: 'EnginePool',
    environment: 'docker',
    make: () => {
      const { engine, calls } = countingEngine();
      return {
        runner: new EnginePool([{ name: 'one', host: 'unix:///nonexistent.sock', engine }]),
        reached: () => calls.length,
      };
    },
  },
  {
    runner: 'LazyRunner',
    environment: 'shell',
    make: () => {
      let loads = 0;
      const runner = new LazyRunner('shell', async () => {
        loads++;
        return new ShellRunner();
      });
      return { runner, reached: () => loads };
    },
  },
];

async function refusal(run: Promise<unknown>): Promise<string> {
  const err = await run.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!isCapsuleError(err, 'PERMISSION_DENIED'))
    throw new Error(`expected PERMISSION_DENIED, got ${String(err)}`);
  return err.message;
}

describe.each(subjects)('$runner: run() refuses before it reaches anything', ({ environment, make }) => {
  const attacks: Array<{ what: string; permit: (c: Capability) => RunnerPermit; says: RegExp }> = [
    {
      what: 'a forged permit (object literal)',
      permit: (c) => ({ capability: c.name, contentHash: c.contentHash }) as unknown as RunnerPermit,
      says: /not made by capsule's executor/,
    },
    { what: 'a copy of a genuine permit', permit: (c) => ({ ...permitFor(c) }), says: /not made/ },
    {
      what: 'a permit for another capability',
      permit: () => permitFor(capability('other', environment)),
      says: /permit is for other/,
    },
    {
      what: 'a permit for another copy with the same name and hash',
      permit: (c) => permitFor({ ...c }),
      says: /another copy/,
    },
    {
      what: 'a spent permit',
      permit: (c) => {
        const p = permitFor(c);
        redeemPermit(p, c);
        return p;
      },
      says: /already used/,
    },
    { what: 'no permit', permit: () => undefined as unknown as RunnerPermit, says: /no permit/ },
  ];

  it.each(attacks)('$what', async ({ permit, says }) => {
    const { runner, reached } = make();
    const c = capability('target', environment);
    expect(await refusal(runner.run({ capability: c, input: '{}' }, permit(c)))).toMatch(says);
    expect(reached() ?? 0).toBe(0);
    await runner.close();
  });

  it('a permit whose capability changed since (its content hash)', async () => {
    const { runner, reached } = make();
    const c = capability('target', environment);
    const permit = permitFor(c);
    c.contentHash = 'sha256:changed';
    expect(await refusal(runner.run({ capability: c, input: '{}' }, permit))).toMatch(
      /content changed since its permit was made \(sha256:target → sha256:changed\)/,
    );
    expect(reached() ?? 0).toBe(0);
    await runner.close();
  });

  it('control: a genuine permit gets past the check (the runner then reaches out)', async () => {
    const { runner, reached } = make();
    const c = capability('target', environment);
    const outcome = await runner.run({ capability: c, input: '{}' }, permitFor(c)).then(
      () => undefined,
      (e: unknown) => e,
    );
    // Whatever stops it later (no such folder, no engine, no worker here), it is not the permit.
    expect(isCapsuleError(outcome, 'PERMISSION_DENIED')).toBe(false);
    const seen = reached();
    if (seen !== undefined) expect(seen).toBeGreaterThan(0);
    await runner.close();
  });
});

describe('a permit', () => {
  it('is frozen and names what it allows', () => {
    const c = capability('named', 'shell');
    const permit = permitFor(c);
    expect(Object.isFrozen(permit)).toBe(true);
    expect({ ...permit }).toMatchObject({ capability: 'named', contentHash: 'sha256:named' });
  });

  it('a delegating runner checks without spending it; the runner that starts the run spends it', () => {
    const c = capability('spent', 'shell');
    const permit = permitFor(c);
    assertPermit(permit, c);
    assertPermit(permit, c);
    redeemPermit(permit, c);
    expect(() => assertPermit(permit, c)).toThrow(/already used/);
  });
});
