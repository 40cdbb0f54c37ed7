import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { tempProject, writeCapability } from '../../../helpers/capability.js';
import { BUILT_CLI } from '../../../helpers/cli.js';
import { holdsWithin } from '../../../helpers/eventually.js';

// Separate `capsule run` processes (the built CLI) on a pool of two engines: placed by what each engine reports
// (the calls claimed on it, its running call containers), not by each process's own counter. Judged by each
// engine's own event log: the call containers it created.

const ENGINES_ROOT = process.env['CAPSULE_ENGINES_ROOT'] ?? '/var/lib/capsule-engines';

describe('pool placement across processes', () => {
  let hosts: { a: string; b: string };
  beforeAll(async () => {
    if (!existsSync(BUILT_CLI)) throw new Error(`${BUILT_CLI} is missing: run "npm run build" first`);
    const index = JSON.parse(await readFile(path.join(ENGINES_ROOT, 'engines.json'), 'utf8')) as {
      engines: Record<string, { host: string }>;
    };
    hosts = { a: index.engines['pool-a']?.host ?? '', b: index.engines['pool-b']?.host ?? '' };
  });

  /** Call containers of `capability` the daemon at `host` created since `since` (its own event log). */
  async function created(host: string, capability: string, since: number): Promise<number> {
    const events = await new DockerodeEngine({ host }).events({
      since: since / 1000,
      until: Date.now() / 1000,
      filters: {
        type: ['container'],
        event: ['create'],
        label: [`capsule.capability=${capability}`, 'capsule.role=call'],
      },
    });
    return events.length;
  }

  const running = async (host: string, capability: string): Promise<number> =>
    (await new DockerodeEngine({ host }).listContainers([`capsule.capability=${capability}`])).filter(
      (c) => c.state === 'running',
    ).length;

  /** Six `capsule run` processes at once, each waiting in its container until the test opens the gate. */
  async function sixAtOnce(extraArgs: string[]): Promise<{ a: number; b: number }> {
    const { root, capRoot } = await tempProject('capsule-pool-placement-');
    const name = `placed-${randomBytes(4).toString('hex')}`;
    await mkdir(path.join(root, 'gate'));
    await chmod(path.join(root, 'gate'), 0o755);
    await writeCapability(
      capRoot,
      name,
      {
        environment: 'docker',
        docker: { image: 'capsule/busybox:1' },
        grants: { fs: [{ path: 'gate', mode: 'ro' }] },
        limits: { timeoutMs: 120_000 },
      },
      { 'run.sh': 'while [ ! -e /project/gate/go ]; do sleep 0.05; done\necho placed\n' },
    );
    const env = {
      ...process.env,
      XDG_STATE_HOME: path.join(root, '.state'),
      XDG_CACHE_HOME: path.join(root, '.cache'),
      CAPSULE_ENGINES: JSON.stringify({
        a: { type: 'docker', host: hosts.a },
        b: { type: 'docker', host: hosts.b },
      }),
    };
    const since = Date.now();
    const runs = Array.from({ length: 6 }, () =>
      execa(process.execPath, [BUILT_CLI, 'run', name, '--grant', `run_capability:${name}`, ...extraArgs], {
        cwd: root,
        env,
        reject: false,
        timeout: 180_000,
      }),
    );
    try {
      // All six are in their containers at once before any ends.
      expect(
        await holdsWithin(
          async () => (await running(hosts.a, name)) + (await running(hosts.b, name)) === 6,
          120_000,
        ),
      ).toBe(true);
    } finally {
      await writeFile(path.join(root, 'gate', 'go'), '');
    }
    const results = await Promise.all(runs);
    for (const r of results)
      expect({ code: r.exitCode, stdout: r.stdout }).toEqual({ code: 0, stdout: 'placed' });
    return { a: await created(hosts.a, name, since), b: await created(hosts.b, name, since) };
  }

  it('six concurrent capsule run processes on a pool of two land three and three', async () => {
    expect(await sixAtOnce([])).toEqual({ a: 3, b: 3 });
  }, 240_000);

  it('control: the same six pinned to one engine all land there (the event logs tell the engines apart)', async () => {
    expect(await sixAtOnce(['--engine', 'a'])).toEqual({ a: 6, b: 0 });
  }, 240_000);
});
