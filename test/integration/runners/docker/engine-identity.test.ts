import { mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CapsuleError } from '../../../../src/base/errors.js';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import type { DockerEngine, EnginePin } from '../../../../src/runners/docker/engine.js';
import { EnginePool } from '../../../../src/runners/docker/engine-pool.js';
import { loadValid, tempProject, writeCapability } from '../../../helpers/capability.js';
import { cli } from '../../../helpers/cli.js';
import { holdsWithin } from '../../../helpers/eventually.js';
import { connectCapsule, textOf, type McpHarness } from '../../mcp/mcp-client.js';
import { startThrowawayEngine, type ThrowawayEngine } from './throwaway-engine.js';
import { permitFor, withPermit } from '../../../helpers/permit.js';

// A posture measurement is bound to the daemon it was made on (docs/scale-out.md). Two dockerds of this file's
// own (started like scripts/extra-engines.sh's, destroyed after): `strong` (an ordinary daemon) and `weak` (its
// runc drops no-new-privileges and the seccomp filter). capsule reaches them through a symlinked socket path
// that a test re-points mid-session, as a person's or an attacker's re-pointed socket would be. Judged by each
// daemon's own event log: which one created a container for the capability's call.

const NAME = `pinned-${process.pid}`;
const CALL_LABEL = `capsule.capability=${NAME}`;
const PROBE_LABEL = 'capsule.role=posture';

let strong: ThrowawayEngine;
let weak: ThrowawayEngine;
let root: string;
let capRoot: string;
let links: string;
const harnesses: McpHarness[] = [];

const nowSec = (): number => Math.floor(Date.now() / 1000);

/** Points `link` at `socket` in one step (a rename over the old link), as `ln -sfn` would. */
async function point(link: string, socket: string): Promise<void> {
  const next = `${link}.next`;
  await rm(next, { force: true });
  await symlink(socket, next);
  await rename(next, link);
}

/** A real MCP session (the SDK's Client over stdio) with `engines` as the person's own CAPSULE_ENGINES. */
async function session(engines: Record<string, { type: 'docker'; host: string }>): Promise<McpHarness> {
  const h = await connectCapsule({
    cwd: root,
    env: { CAPSULE_ENGINES: JSON.stringify(engines), XDG_STATE_HOME: path.join(root, '.state') },
  });
  harnesses.push(h);
  return h;
}

async function call(h: McpHarness): Promise<{ isError: boolean; text: string }> {
  const r = await h.client.callTool(
    { name: 'run_capability', arguments: { name: NAME, input: {} } },
    undefined,
    {
      timeout: 120_000,
    },
  );
  return { isError: r.isError === true, text: textOf(r) };
}

beforeAll(async () => {
  [strong, weak] = await Promise.all([
    startThrowawayEngine('strong'),
    startThrowawayEngine('weak', { weak: true }),
  ]);
  ({ root, capRoot } = await tempProject('capsule-engine-identity-'));
  await writeCapability(
    capRoot,
    NAME,
    { environment: 'docker', docker: { image: 'capsule/busybox:1' } },
    { 'run.sh': 'echo ran\n' },
  );
  // Approved for the project: valid only while the capability is sandboxed where it runs.
  const shown = await cli(['show', NAME, '--json'], { cwd: root });
  const { contentHash } = JSON.parse(shown.stdout) as { contentHash: string };
  await writeFile(
    path.join(root, 'capsule.json'),
    JSON.stringify({
      schemaVersion: 1,
      allowlist: { [`run_capability:${NAME}`]: { level: 'AlwaysThisProject', contentHash } },
    }),
  );
  links = await mkdtemp(path.join(tmpdir(), 'capsule-engine-links-'));
}, 300_000);

afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

afterAll(async () => {
  await Promise.all([strong?.destroy(), weak?.destroy()]);
  await rm(links, { recursive: true, force: true });
}, 300_000);

describe('posture is measured for the daemon that runs the call', () => {
  it('a socket re-pointed mid-session from the strong daemon to the weak one: the call is refused, the weak daemon creates nothing for it; pointed back, the strong one runs it again (A→B→A)', async () => {
    const link = path.join(links, 'swap.sock');
    await point(link, strong.socket);
    const h = await session({ e: { type: 'docker', host: `unix://${link}` } });
    const t0 = nowSec();
    expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
    expect((await strong.createdSince(t0, CALL_LABEL)).length).toBeGreaterThan(0);

    const t1 = nowSec();
    await point(link, weak.socket);
    const refused = await call(h);
    expect(refused.isError).toBe(true);
    expect(refused.text).toMatch(/not sandboxed/i);
    // The weak daemon's own log: measured (a probe ran there), never a container for the call.
    expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
    expect((await weak.createdSince(t1, PROBE_LABEL)).length).toBeGreaterThan(0);

    const t2 = nowSec();
    await point(link, strong.socket);
    expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
    expect((await strong.createdSince(t2, CALL_LABEL)).length).toBeGreaterThan(0);
    // Measured again before it ran (the session did not fall back on its first measurement).
    expect((await strong.createdSince(t2, PROBE_LABEL)).length).toBeGreaterThan(0);
    expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
  });

  it('the daemon goes away and a weaker one answers at the same address (the route reported): the call is refused, the weaker daemon creates nothing for it', async () => {
    const link = path.join(links, 'gone.sock');
    await point(link, strong.socket);
    const h = await session({ e: { type: 'docker', host: `unix://${link}` } });
    try {
      expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
      await strong.stop();
      const t1 = nowSec();
      await point(link, weak.socket);
      for (let i = 0; i < 2; i++) {
        const refused = await call(h);
        expect(refused.isError).toBe(true);
        expect(refused.text).toMatch(/not sandboxed/i);
      }
      expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
    } finally {
      await strong.restart({});
    }
  });

  it('swapped to the weak daemon and back between two calls (A→B→A): the next call runs on the daemon measured, the weak one sees nothing', async () => {
    const link = path.join(links, 'aba.sock');
    await point(link, strong.socket);
    const h = await session({ e: { type: 'docker', host: `unix://${link}` } });
    expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
    const t1 = nowSec();
    await point(link, weak.socket);
    await point(link, strong.socket);
    expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
    expect((await strong.createdSince(t1, CALL_LABEL)).length).toBeGreaterThan(0);
    expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
  });

  it('one member of a pool re-pointed to the weak daemon: the call is refused (the weakest engine decides), the weak daemon creates nothing for it', async () => {
    const link = path.join(links, 'member.sock');
    await point(link, strong.socket);
    const h = await session({
      a: { type: 'docker', host: `unix://${link}` },
      b: { type: 'docker', host: `unix://${strong.socket}` },
    });
    expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
    const t1 = nowSec();
    await point(link, weak.socket);
    for (let i = 0; i < 2; i++) {
      const refused = await call(h);
      expect(refused.isError).toBe(true);
      expect(refused.text).toMatch(/engine a: no-new-privileges is off/);
    }
    expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
  });

  it('the daemon restarted with a weaker configuration at the same socket (same data root, same ID, same canary): the next call is measured again and refused; the daemon creates nothing for it', async () => {
    const h = await session({ e: { type: 'docker', host: `unix://${strong.socket}` } });
    try {
      expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
      await strong.restart({ weak: true });
      const t1 = nowSec();
      const refused = await call(h);
      expect(refused.isError).toBe(true);
      expect(refused.text).toMatch(/not sandboxed/i);
      // dockerd keeps its events in memory: everything after the restart is in this log.
      expect(await strong.createdSince(t1 - 1, CALL_LABEL)).toEqual([]);
      expect((await strong.createdSince(t1 - 1, PROBE_LABEL)).length).toBeGreaterThan(0);
    } finally {
      await strong.restart({});
    }
  });

  it('a daemon that goes away then comes back: the call meanwhile is not run, the next one is measured again before it runs', async () => {
    const h = await session({ e: { type: 'docker', host: `unix://${strong.socket}` } });
    try {
      expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
      await strong.stop();
      const failed = await call(h);
      expect(failed.isError).toBe(true);
    } finally {
      await strong.restart({});
    }
    const t1 = nowSec();
    expect(await call(h)).toEqual({ isError: false, text: 'ran\n' });
    expect((await strong.createdSince(t1 - 1, CALL_LABEL)).length).toBeGreaterThan(0);
    expect((await strong.createdSince(t1 - 1, PROBE_LABEL)).length).toBeGreaterThan(0);
  });
});

describe('the pool, judged by effect (library)', () => {
  /** The same engine with its binding switched off: a pin that never checks anything. */
  function unbound(engine: DockerodeEngine): DockerEngine {
    const pin = (): Promise<EnginePin> =>
      Promise.resolve({
        identity: { id: '', name: '', rootDir: '', serverVersion: '', host: '', canary: '' },
        check: () => Promise.resolve(undefined),
        lose: () => {},
        release: () => Promise.resolve(),
      });
    return new Proxy(engine, {
      get: (target, prop, receiver) =>
        prop === 'pin'
          ? pin
          : prop === 'another'
            ? undefined
            : (Reflect.get(target, prop, receiver) as unknown),
    }) as DockerEngine;
  }

  async function capability(): ReturnType<typeof loadValid> {
    return loadValid(path.join(capRoot, NAME), root, capRoot);
  }

  /**
   * The route of the report: the strong daemon goes away and a weaker one answers at the same address (the link
   * re-pointed while the first is down). What the pool judges before the call (the executor asks before every
   * call) and what the call, judged sandboxed, then does.
   */
  async function goneAndReplaced(
    engine: DockerEngine,
    link: string,
  ): Promise<{ judged: string | undefined; outcome: unknown }> {
    const pool = new EnginePool([{ name: 'e', engine }]);
    try {
      expect(await pool.posture('e')).toMatchObject({ noNewPrivs: 1, seccomp: 2 });
      expect(await pool.measureIsolation()).toBeUndefined();
      await strong.stop();
      await point(link, weak.socket);
      const judged = await pool.measureIsolation();
      const outcome = await pool
        .run(...withPermit({ capability: await capability(), input: '{}', requireSandboxed: true }))
        .then(
          (r) => r,
          (e: unknown) => e,
        );
      return { judged, outcome };
    } finally {
      await pool.close();
      await strong.restart({});
    }
  }

  it('the daemon reloads its configuration (SIGHUP: runtimes can change without a restart): the next call is measured again first', async () => {
    const pool = new EnginePool([
      { name: 'e', engine: new DockerodeEngine({ host: `unix://${strong.socket}` }) },
    ]);
    try {
      expect((await pool.measurement('e')).generation).toBe(1);
      const cap = await capability();
      await pool.run({ capability: cap, input: '{}', requireSandboxed: true }, permitFor(cap));
      expect((await pool.measurement('e')).generation).toBe(1);
      const t1 = nowSec();
      process.kill(strong.pid(), 'SIGHUP');
      // The reload event reaches the watch; the next call is preceded by a new probe.
      await holdsWithin(async () => (await pool.measurement('e')).generation !== 1, 60_000, 50);
      const r = await pool.run({ capability: cap, input: '{}', requireSandboxed: true }, permitFor(cap));
      expect(r.stdout).toBe('ran\n');
      expect((await pool.measurement('e')).generation).toBe(2);
      expect((await strong.createdSince(t1 - 1, PROBE_LABEL)).length).toBeGreaterThan(0);
    } finally {
      await pool.close();
    }
  });

  it('a failed health check (the daemon hung mid-call), then recovery: the next call is measured again before it runs', async () => {
    const gate = path.join(root, `gate-${process.pid}`);
    await writeCapability(
      capRoot,
      `${NAME}-gated`,
      { environment: 'docker', docker: { image: 'capsule/busybox:1' }, limits: { timeoutMs: 60_000 } },
      { 'run.sh': 'while [ ! -e /capability/go ]; do sleep 0.05; done\necho gated\n' },
    );
    const gated = await loadValid(path.join(capRoot, `${NAME}-gated`), root, capRoot);
    const pool = new EnginePool([
      { name: 'e', engine: new DockerodeEngine({ host: `unix://${strong.socket}` }) },
    ]);
    try {
      expect((await pool.measurement('e')).generation).toBe(1);
      const running = pool.run({ capability: gated, input: '{}' }, permitFor(gated));
      running.catch(() => undefined);
      const engine = new DockerodeEngine({ host: `unix://${strong.socket}` });
      await holdsWithin(
        async () =>
          (await engine.listContainers([`capsule.capability=${NAME}-gated`])).some(
            (c) => c.state === 'running',
          ),
        60_000,
        50,
      );
      process.kill(strong.pid(), 'SIGSTOP');
      const err = await running.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(CapsuleError);
      expect(pool.status()[0]?.healthy).toBe(false);
      process.kill(strong.pid(), 'SIGCONT');
      const t1 = nowSec();
      const r = await pool.run(
        ...withPermit({ capability: await capability(), input: '{}', requireSandboxed: true }),
      );
      expect(r.stdout).toBe('ran\n');
      expect((await pool.measurement('e')).generation).toBe(2);
      expect((await strong.createdSince(t1 - 1, PROBE_LABEL)).length).toBeGreaterThan(0);
    } finally {
      process.kill(strong.pid(), 'SIGCONT');
      await pool.close();
      await rm(gate, { force: true });
    }
    // The first measurement's canary went with the second one (the same daemon, back), the second's with close().
    const pins = await new DockerodeEngine({ host: `unix://${strong.socket}` }).listVolumes([
      'capsule.role=pin',
      `capsule.pid=${process.pid}`,
    ]);
    expect(pins).toEqual([]);
  });

  it('control: without the binding, a call judged on the strong daemon lands on the weaker one that replaced it', async () => {
    const link = path.join(links, 'control.sock');
    await point(link, strong.socket);
    const t1 = nowSec();
    const { judged, outcome } = await goneAndReplaced(
      unbound(new DockerodeEngine({ host: `unix://${link}` })),
      link,
    );
    // The first measurement is trusted: judged sandboxed, and the weaker daemon runs the call.
    expect(judged).toBeUndefined();
    expect(outcome).toMatchObject({ exitCode: 0, stdout: 'ran\n' });
    expect((await weak.createdSince(t1, CALL_LABEL)).length).toBeGreaterThan(0);
  });

  it('with the binding: the daemon gone and a weaker one at its address: judged by the weaker posture, the call is refused, the weaker one creates nothing for it', async () => {
    const link = path.join(links, 'replaced.sock');
    await point(link, strong.socket);
    const t1 = nowSec();
    const { judged, outcome } = await goneAndReplaced(new DockerodeEngine({ host: `unix://${link}` }), link);
    expect(judged).toContain('engine e: no-new-privileges is off');
    expect(outcome).toBeInstanceOf(CapsuleError);
    expect((outcome as CapsuleError).code).toBe('PERMISSION_DENIED');
    expect((outcome as CapsuleError).message).toContain('engine e: no-new-privileges is off');
    expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
  });

  it('with the binding: the same call after the same swap is refused as not sandboxed and the weak daemon creates nothing for it', async () => {
    const link = path.join(links, 'bound.sock');
    await point(link, strong.socket);
    const pool = new EnginePool([{ name: 'e', engine: new DockerodeEngine({ host: `unix://${link}` }) }]);
    try {
      expect(await pool.measureIsolation()).toBeUndefined();
      const t1 = nowSec();
      await point(link, weak.socket);
      const err = await pool
        .run(...withPermit({ capability: await capability(), input: '{}', requireSandboxed: true }))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(err).toBeInstanceOf(CapsuleError);
      expect((err as CapsuleError).code).toBe('PERMISSION_DENIED');
      expect((err as CapsuleError).message).toContain('engine e: no-new-privileges is off');
      expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
      // The measurement it runs on now is the weak daemon's, bound to it.
      const m = await pool.measurement('e');
      expect(m.identity?.rootDir).toBe(path.join(weak.dir, 'data'));
      expect(m.generation).toBe(2);
    } finally {
      await pool.close();
    }
  });

  it('a pool member swapped: a call judged sandboxed runs on the member still measured strong, never on the swapped one', async () => {
    const link = path.join(links, 'pool.sock');
    await point(link, strong.socket);
    const pool = new EnginePool([
      { name: 'a', engine: new DockerodeEngine({ host: `unix://${link}` }) },
      { name: 'b', engine: new DockerodeEngine({ host: `unix://${strong.socket}` }) },
    ]);
    try {
      expect(await pool.measureIsolation()).toBeUndefined();
      const t1 = nowSec();
      await point(link, weak.socket);
      const cap = await capability();
      for (let i = 0; i < 3; i++) {
        const r = await pool.run({ capability: cap, input: '{}', requireSandboxed: true }, permitFor(cap));
        expect(r.stdout).toBe('ran\n');
      }
      expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
      // The three calls (and the containers prepared ahead for the next ones) are the strong daemon's.
      expect((await strong.createdSince(t1, CALL_LABEL)).length).toBeGreaterThanOrEqual(3);
      expect(await pool.measureIsolation()).toContain('engine a: no-new-privileges is off');
    } finally {
      await pool.close();
    }
  });

  it('a connection that reaches another daemon sends nothing: every request after the swap fails, none reaches the weak daemon', async () => {
    const link = path.join(links, 'conn.sock');
    await point(link, strong.socket);
    const engine = new DockerodeEngine({ host: `unix://${link}` });
    const pin = await engine.pin({
      name: `capsule-cap-test-p${process.pid}-conn-pin`,
      labels: { 'capsule.managed': '1' },
    });
    const t1 = nowSec();
    try {
      await point(link, weak.socket);
      // Concurrent requests need new connections: each one is checked for the canary first.
      const results = await Promise.allSettled(
        [1, 2, 3, 4].map(() =>
          engine.createContainer({
            image: 'capsule/busybox:1',
            cmd: ['true'],
            workingDir: '/',
            user: '65534',
            env: [],
            labels: { 'capsule.capability': NAME },
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
            memoryBytes: 32 * 1024 * 1024,
            memorySwapBytes: 32 * 1024 * 1024,
            pidsLimit: 8,
            nanoCpus: 5e8,
            ulimits: [],
            tmpfs: {},
            mounts: [],
            logDriver: 'none',
          }),
        ),
      );
      // A connection kept alive from before still ends at the strong daemon: at most that one succeeded.
      const made = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
      expect(await weak.createdSince(t1, CALL_LABEL)).toEqual([]);
      expect(await pin.check()).toMatch(/another (daemon|socket)/);
      const strongEngine = new DockerodeEngine({ host: `unix://${strong.socket}` });
      for (const id of made) await strongEngine.remove(id);
    } finally {
      await pin.release();
      await new DockerodeEngine({ host: `unix://${strong.socket}` })
        .removeVolume(`capsule-cap-test-p${process.pid}-conn-pin`)
        .catch(() => {});
    }
  });

  it('capsule engines --json shows each engine with its identity, measured fields and verdict, and leaves no probe or canary behind', async () => {
    const r = await cli(['engines', '--json'], {
      cwd: root,
      env: {
        ...process.env,
        XDG_STATE_HOME: path.join(root, '.state'),
        CAPSULE_ENGINES: JSON.stringify({
          s: { type: 'docker', host: `unix://${strong.socket}` },
          w: { type: 'docker', host: `unix://${weak.socket}` },
        }),
      },
    });
    expect(r.code).toBe(0);
    const rows = JSON.parse(r.stdout) as Array<Record<string, unknown>>;
    expect(rows).toMatchObject([
      {
        name: 's',
        healthy: true,
        sandboxed: true,
        missing: [],
        identity: {
          rootDir: path.join(strong.dir, 'data'),
          host: `unix://${strong.socket}`,
          socket: { path: strong.socket, realPath: strong.socket },
        },
        posture: { noNewPrivs: 1, seccomp: 2, uid: 65534, readOnlyRoot: true, interfaces: ['lo'] },
      },
      {
        name: 'w',
        healthy: true,
        sandboxed: false,
        missing: ['no-new-privileges is off', 'no seccomp filter'],
        identity: { rootDir: path.join(weak.dir, 'data') },
        posture: { noNewPrivs: 0, seccomp: 0 },
      },
    ]);
    for (const row of rows) {
      expect(typeof (row['identity'] as { id?: unknown }).id).toBe('string');
      expect(Number.isNaN(Date.parse(row['measuredAt'] as string))).toBe(false);
    }
    // The command's own probes and canaries (its process is gone; this process's pools may hold theirs).
    for (const e of [strong, weak]) {
      const engine = new DockerodeEngine({ host: `unix://${e.socket}` });
      const others = (labels: Record<string, string>): boolean =>
        labels['capsule.pid'] !== String(process.pid);
      expect((await engine.listContainers([PROBE_LABEL])).filter((c) => others(c.labels))).toEqual([]);
      expect(
        (await engine.listVolumes(['capsule.role=pin'])).filter((v) => !v.includes(`-p${process.pid}-`)),
      ).toEqual([]);
    }
  });
});
