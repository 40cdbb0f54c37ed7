import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CapsuleError } from '../../../../src/base/errors.js';
import { manifestSchema } from '../../../../src/manifest/schema.js';
import type { Capability } from '../../../../src/manifest/types.js';
import type { DockerEngine, SwarmApi, SwarmServiceSpec } from '../../../../src/runners/docker/engine.js';
import { SwarmRunner } from '../../../../src/runners/docker/swarm-runner.js';
import { permitFor } from '../../../helpers/permit.js';

const STRONG = 'CapEff=0000000000000000\nNoNewPrivs=1\nSeccomp=2\nuid=65534\nif=lo\nrootfs=ro\n';
const WEAK = 'CapEff=0000000000000000\nNoNewPrivs=0\nSeccomp=0\nuid=65534\nif=lo\nrootfs=ro\n';

/** One stdout frame of the multiplexed log format. */
function frame(text: string): Buffer {
  const body = Buffer.from(text);
  const head = Buffer.alloc(8);
  head[0] = 1;
  head.writeUInt32BE(body.length, 4);
  return Buffer.concat([head, body]);
}

interface FakeNode {
  id: string;
  version: number;
  state: string;
  probe: string;
}

/** A swarm manager in memory: a service completes at once on the node its constraint names (or the first). */
function fakeSwarm(nodes: FakeNode[]) {
  const services = new Map<string, SwarmServiceSpec>();
  const placed: string[] = [];
  let next = 0;
  const isProbe = (spec: SwarmServiceSpec): boolean => spec.command.some((c) => c.includes('probe.sh'));
  const nodeOf = (spec: SwarmServiceSpec): FakeNode | undefined => {
    const id = spec.constraints?.[0]?.replace('node.id==', '');
    return id === undefined ? nodes[0] : nodes.find((n) => n.id === id);
  };
  const manager = {
    nodes: () =>
      Promise.resolve(
        nodes.map((n) => ({ id: n.id, hostname: n.id, state: n.state, role: 'worker', version: n.version })),
      ),
    createConfig: () => Promise.resolve(`cfg${next++}`),
    removeConfig: () => Promise.resolve(),
    createService: (spec: SwarmServiceSpec) => {
      const id = `svc${next++}`;
      services.set(id, spec);
      if (!isProbe(spec)) placed.push(nodeOf(spec)?.id ?? '?');
      return Promise.resolve(id);
    },
    serviceTasks: (id: string) => {
      const spec = services.get(id);
      const node = spec === undefined ? undefined : nodeOf(spec);
      return Promise.resolve([
        { id: `t-${id}`, state: 'complete', exitCode: 0, containerId: 'c', nodeId: node?.id, message: '' },
      ]);
    },
    serviceLogs: (id: string) => {
      const spec = services.get(id);
      if (spec === undefined) return Promise.resolve(Buffer.alloc(0));
      return Promise.resolve(frame(isProbe(spec) ? (nodeOf(spec)?.probe ?? '') : 'ran\n'));
    },
    removeService: () => Promise.resolve(),
  } as unknown as DockerEngine & SwarmApi;
  return { manager, placed };
}

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function capability(): Promise<Capability> {
  const dir = await mkdtemp(path.join(tmpdir(), 'capsule-swarm-unit-'));
  dirs.push(dir);
  await writeFile(path.join(dir, 'run.sh'), 'echo ran\n');
  return {
    name: 'x',
    environment: 'docker',
    manifest: manifestSchema.parse({
      schemaVersion: 1,
      name: 'x',
      description: 'x',
      environment: 'docker',
      entry: 'run.sh',
      docker: { image: 'capsule/busybox:1' },
    }),
    dir,
    manifestPath: path.join(dir, 'capability.json'),
    entryPath: path.join(dir, 'run.sh'),
    contentHash: 'sha256:0',
    root: dir,
    fsGrants: [],
  };
}

describe('a swarm measured node by node: calls go to the nodes measured', () => {
  it('places each call on a measured node, and a call judged sandboxed only on a node measured strong', async () => {
    const nodes: FakeNode[] = [
      { id: 'weak', version: 5, state: 'ready', probe: WEAK },
      { id: 'strong', version: 7, state: 'ready', probe: STRONG },
    ];
    const { manager, placed } = fakeSwarm(nodes);
    const runner = new SwarmRunner({ manager });
    expect(await runner.measureIsolation()).toBe('node weak: no-new-privileges is off, no seccomp filter');
    const cap = await capability();
    for (let i = 0; i < 4; i++)
      await runner.run({ capability: cap, input: '', requireSandboxed: true }, permitFor(cap));
    expect(placed).toEqual(['strong', 'strong', 'strong', 'strong']);
    // Without that requirement (allowed as not sandboxed), both measured nodes take calls.
    for (let i = 0; i < 4; i++) await runner.run({ capability: cap, input: '' }, permitFor(cap));
    expect(new Set(placed.slice(4))).toEqual(new Set(['weak', 'strong']));
  });

  it('a measured node that changed (its version moved: it left and came back) or a node that joined: no call runs until it is measured again', async () => {
    const nodes: FakeNode[] = [{ id: 'a', version: 1, state: 'ready', probe: STRONG }];
    const { manager, placed } = fakeSwarm(nodes);
    const runner = new SwarmRunner({ manager });
    expect(await runner.measureIsolation()).toBeUndefined();
    const cap = await capability();
    await runner.run({ capability: cap, input: '' }, permitFor(cap));
    expect(placed).toEqual(['a']);

    nodes[0] = { id: 'a', version: 2, state: 'ready', probe: WEAK };
    expect(await runner.nodesChanged()).toBe('node a of the swarm changed since its posture was measured');
    const changed = await runner.run({ capability: cap, input: '' }, permitFor(cap)).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(changed).toBeInstanceOf(CapsuleError);
    expect(placed).toEqual(['a']);
    // Measured again: the node's new posture decides.
    expect(await runner.measureIsolation()).toContain('node a: no-new-privileges is off');
    const refused = await runner
      .run({ capability: cap, input: '', requireSandboxed: true }, permitFor(cap))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect((refused as CapsuleError).code).toBe('PERMISSION_DENIED');
    expect(placed).toEqual(['a']);

    nodes.push({ id: 'b', version: 1, state: 'ready', probe: STRONG });
    expect(await runner.nodesChanged()).toBe('node b joined the swarm since it was measured');
  });
});
