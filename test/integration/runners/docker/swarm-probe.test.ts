import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { EnginePool } from '../../../../src/runners/docker/engine-pool.js';
import { SwarmRunner } from '../../../../src/runners/docker/swarm-runner.js';
import { tempProject } from '../../../helpers/capability.js';
import { cli } from '../../../helpers/cli.js';

// The swarm's posture probe runs once on each node however many calls start together. Counted by effect: the
// probe containers each node's own event log shows were created for this process.

const ENGINES_ROOT = process.env['CAPSULE_ENGINES_ROOT'] ?? '/var/lib/capsule-engines';

describe('swarm posture probe, once per node', () => {
  let manager: DockerodeEngine;
  let worker: DockerodeEngine;
  let managerHost: string;
  beforeAll(async () => {
    const index = JSON.parse(await readFile(path.join(ENGINES_ROOT, 'engines.json'), 'utf8')) as {
      engines: Record<string, { host: string }>;
    };
    managerHost = index.engines['swarm-m']?.host as string;
    manager = new DockerodeEngine({ host: managerHost });
    worker = new DockerodeEngine({ host: index.engines['swarm-w']?.host as string });
  });

  /** Probe task containers created for this process since `since`, per node. */
  async function probes(since: number): Promise<number[]> {
    return Promise.all(
      [manager, worker].map(
        async (node) =>
          (
            await node.events({
              since: since / 1000,
              until: Date.now() / 1000,
              filters: {
                type: ['container'],
                event: ['create'],
                label: ['capsule.capability=capsule-posture-probe', `capsule.pid=${process.pid}`],
              },
            })
          ).length,
      ),
    );
  }

  it('four measurements started together on one runner probe each node once', async () => {
    const runner = new SwarmRunner({ manager });
    const since = Date.now();
    try {
      const verdicts = await Promise.all([1, 2, 3, 4].map(() => runner.measureIsolation()));
      expect(verdicts).toEqual([undefined, undefined, undefined, undefined]);
      // Asked again with no node changed: that measurement still holds.
      expect(await runner.measureIsolation()).toBeUndefined();
      expect(await probes(since)).toEqual([1, 1]);
    } finally {
      await runner.close();
    }
  });

  it('control: measuring again on purpose probes each node again (the count sees every probe)', async () => {
    const runner = new SwarmRunner({ manager });
    const since = Date.now();
    try {
      await runner.measureNodes();
      await runner.measureNodes();
      expect(await probes(since)).toEqual([2, 2]);
    } finally {
      await runner.close();
    }
  });

  it('four calls judged together on a pool holding the swarm probe each node once', async () => {
    const pool = new EnginePool([{ name: 'sw', kind: 'swarm', engine: manager }]);
    const since = Date.now();
    try {
      const verdicts = await Promise.all([1, 2, 3, 4].map(() => pool.measureIsolation()));
      expect(verdicts).toEqual([undefined, undefined, undefined, undefined]);
      expect(await probes(since)).toEqual([1, 1]);
    } finally {
      await pool.close();
    }
  });

  it("capsule engines --json reports each node's measured posture", async () => {
    const { root } = await tempProject('capsule-swarm-engines-');
    const r = await cli(['engines', '--json'], {
      cwd: root,
      env: {
        ...process.env,
        XDG_STATE_HOME: path.join(root, '.state'),
        CAPSULE_ENGINES: JSON.stringify({ sw: { type: 'swarm', manager: managerHost } }),
      },
    });
    expect(r.code).toBe(0);
    const [row] = JSON.parse(r.stdout) as Array<{ nodes: Array<Record<string, unknown>> }>;
    expect(row?.nodes).toHaveLength(2);
    for (const node of row?.nodes ?? []) {
      expect(node).toMatchObject({ sandboxed: true, missing: [] });
      expect(node['posture']).toMatchObject({
        noNewPrivs: 1,
        seccomp: 2,
        uid: 65534,
        readOnlyRoot: true,
        interfaces: ['lo'],
      });
    }
  });
});
