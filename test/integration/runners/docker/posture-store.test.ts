import { mkdir, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { StateKey } from '../../../../src/project/state-key.js';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { PostureStore } from '../../../../src/runners/docker/posture-store.js';
import { tempProject, writeCapability } from '../../../helpers/capability.js';
import { cli } from '../../../helpers/cli.js';

// A measured posture kept in the per-user state between processes (each `cli()` below opens a runtime and an
// engine pool of its own, as a new process would). Judged by effect: the probe containers each daemon's own
// event log shows this process created, and whether the project-granted call ran.

const ENGINES_ROOT = process.env['CAPSULE_ENGINES_ROOT'] ?? '/var/lib/capsule-engines';

async function hostOf(name: string): Promise<string> {
  const index = JSON.parse(await readFile(path.join(ENGINES_ROOT, 'engines.json'), 'utf8')) as {
    engines: Record<string, { host: string }>;
  };
  const host = index.engines[name]?.host;
  if (host === undefined)
    throw new Error(`these tests need the extra engine ${name} (scripts/extra-engines.sh up)`);
  return host;
}

describe('engine posture kept between processes', () => {
  let strong: string;
  let weak: string;
  beforeAll(async () => {
    strong = await hostOf('pool-a');
    weak = await hostOf('weak');
  });

  /** Probe containers this process created on the daemon at `host` since `since` (its own event log). */
  async function probesSince(host: string, since: number): Promise<number> {
    const events = await new DockerodeEngine({ host }).events({
      since: since / 1000,
      until: Date.now() / 1000,
      filters: {
        type: ['container'],
        event: ['create'],
        label: ['capsule.role=posture', `capsule.pid=${process.pid}`],
      },
    });
    return events.length;
  }

  /** A project whose docker capability is granted at project level (so the measured posture decides). */
  async function project(engineHost: string): Promise<{
    run: () => Promise<{ code: number; stdout: string; probes: number }>;
    stateDir: string;
    root: string;
    setHost: (host: string) => void;
  }> {
    const { root, capRoot } = await tempProject('capsule-posture-store-');
    await writeCapability(
      capRoot,
      'posture-kept',
      { environment: 'docker', docker: { image: 'capsule/busybox:1' } },
      { 'run.sh': 'echo ran-here\n' },
    );
    let host = engineHost;
    const env = (): NodeJS.ProcessEnv => ({
      ...process.env,
      XDG_STATE_HOME: path.join(root, '.state'),
      CAPSULE_ENGINES: JSON.stringify({ e: { type: 'docker', host } }),
    });
    const shown = await cli(['show', 'posture-kept', '--json'], { cwd: root, env: env() });
    const { contentHash } = JSON.parse(shown.stdout) as { contentHash: string };
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({
        schemaVersion: 1,
        allowlist: { 'run_capability:posture-kept': { level: 'AlwaysThisProject', contentHash } },
      }),
    );
    return {
      root,
      stateDir: path.join(root, '.state', 'capsule'),
      setHost: (h) => (host = h),
      run: async () => {
        const since = Date.now();
        const target = host;
        const r = await cli(['run', 'posture-kept', '--no-prompt'], { cwd: root, env: env() });
        // The daemon the address leads to now is the one whose log is read.
        const real = target.startsWith('unix://') ? `unix://${await realSocket(target.slice(7))}` : target;
        return { code: r.code, stdout: r.stdout, probes: await probesSince(real, since) };
      },
    };
  }

  const realSocket = (p: string): Promise<string> => realpath(p);

  /** The stored record of `address` in `stateDir`, as JSON. */
  async function recordOf(stateDir: string, address: string): Promise<Record<string, unknown>> {
    const store = new PostureStore({ stateDir, key: new StateKey({ stateDir }) });
    return JSON.parse(await readFile(store.fileFor(address), 'utf8')) as Record<string, unknown>;
  }

  async function writeRecord(
    stateDir: string,
    address: string,
    record: Record<string, unknown>,
    resign: boolean,
  ): Promise<void> {
    const key = new StateKey({ stateDir });
    const store = new PostureStore({ stateDir, key });
    const { mac, schemaVersion, ...body } = record;
    const signed = resign ? await key.sign('engine-posture', address, body) : mac;
    await mkdir(store.dir, { recursive: true });
    await writeFile(store.fileFor(address), JSON.stringify({ schemaVersion, ...body, mac: signed }));
  }

  const STRONG_POSTURE = {
    capEff: '0000000000000000',
    noNewPrivs: 1,
    seccomp: 2,
    uid: 65534,
    interfaces: ['lo'],
    readOnlyRoot: true,
    runtime: 'runc',
  };

  it('a later process on the same daemon does not probe it again (the control: reuse is what the attacks must defeat)', async () => {
    const p = await project(strong);
    const first = await p.run();
    expect(first).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 1 });
    const second = await p.run();
    expect(second).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 0 });
  });

  it('a forged record (the weak daemon recorded as strong, its MAC left as it was) is ignored: measured again, not run', async () => {
    const p = await project(weak);
    expect(await p.run()).toMatchObject({ code: 77, stdout: '', probes: 1 });
    const record = await recordOf(p.stateDir, weak);
    expect(record['posture']).toMatchObject({ noNewPrivs: 0, seccomp: 0 });
    await writeRecord(p.stateDir, weak, { ...record, posture: STRONG_POSTURE }, false);
    expect(await p.run()).toMatchObject({ code: 77, stdout: '', probes: 1 });
    // Control: the same edit with a MAC made with the user's key is taken as capsule's own, so the MAC is
    // what stopped the forgery above.
    const again = await recordOf(p.stateDir, weak);
    await writeRecord(p.stateDir, weak, { ...again, posture: STRONG_POSTURE }, true);
    expect(await p.run()).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 0 });
  });

  it("another daemon's record, validly MACed for this address, is not reused: the daemon here lacks its canary", async () => {
    const onStrong = await project(strong);
    expect(await onStrong.run()).toMatchObject({ code: 0, probes: 1 });
    const theirs = await recordOf(onStrong.stateDir, strong);
    const p = await project(weak);
    await writeRecord(p.stateDir, weak, { ...theirs, address: weak }, true);
    expect(await p.run()).toMatchObject({ code: 77, stdout: '', probes: 1 });
  });

  it('an address re-pointed at another daemon between processes: measured again there, the call refused', async () => {
    const p = await project(strong);
    const link = path.join(p.root, 'engine.sock');
    await symlink(strong.slice('unix://'.length), link);
    p.setHost(`unix://${link}`);
    expect(await p.run()).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 1 });
    expect(await p.run()).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 0 });
    await rm(link);
    await symlink(weak.slice('unix://'.length), link);
    expect(await p.run()).toMatchObject({ code: 77, stdout: '', probes: 1 });
  });

  it('a reuse moves the record on to a newer witness: the probe may roll out of the daemon log, the record still holds', async () => {
    const p = await project(strong);
    expect(await p.run()).toMatchObject({ code: 0, probes: 1 });
    expect(await p.run()).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 0 });
    const record = await recordOf(p.stateDir, strong);
    const witness = record['witness'] as { id: string } | undefined;
    expect(witness?.id).toMatch(/^[0-9a-f]{64}$/);
    expect(witness?.id).not.toBe(record['probe']);
    // As if the probe's creation had rolled out of the daemon's 256-event log: the witness proves the daemon.
    await writeRecord(p.stateDir, strong, { ...record, probe: 'f'.repeat(64) }, true);
    expect(await p.run()).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 0 });
  });

  it('a witness the daemon never logged (a record naming another creation) is not reused: measured again', async () => {
    const p = await project(strong);
    expect(await p.run()).toMatchObject({ code: 0, probes: 1 });
    const record = await recordOf(p.stateDir, strong);
    await writeRecord(
      p.stateDir,
      strong,
      { ...record, witness: { id: 'e'.repeat(64), since: Date.now() / 1000 - 60 } },
      true,
    );
    expect(await p.run()).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 1 });
    // Control: the probe's own creation, named as the witness, is found and reused.
    const again = await recordOf(p.stateDir, strong);
    const probe = again['probe'] as string;
    await writeRecord(
      p.stateDir,
      strong,
      { ...again, witness: { id: probe, since: (again['measuredAt'] as number) / 1000 - 5 } },
      true,
    );
    expect(await p.run()).toMatchObject({ code: 0, stdout: 'ran-here\n', probes: 0 });
  });
});
