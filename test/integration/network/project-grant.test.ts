import { cp, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Executor } from '../../../src/executor/executor.js';
import { MemoryAuditSink } from '../../../src/permissions/audit/memory-sink.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import type { PromptQuestion, Prompter } from '../../../src/permissions/prompter.js';
import type { AskAnswer } from '../../../src/permissions/types.js';
import { Registry } from '../../../src/registry/registry.js';
import { DockerRunner } from '../../../src/runners/docker/runner.js';
import { tempProject, writeManifest } from '../../helpers/capability.js';
import { listen, type Listener } from './loopback.js';

// Attack: after a person allowed a network capability for the whole project, the agent edits its
// manifest to add a host. The project grant covered the hosts that were shown, so the new host asks
// again; until a person approves, its listener sees no connection.
const EXAMPLE = fileURLToPath(new URL('../../../capabilities/fetch-docker/', import.meta.url));

describe('a project grant covers the hosts that were shown', () => {
  let first: Listener;
  let added: Listener;
  let runner: DockerRunner;

  beforeAll(async () => {
    first = await listen((_req, res) => res.end('first host'));
    added = await listen((_req, res) => res.end('added host'));
    runner = new DockerRunner({ env: process.env, prewarm: 0 });
  });

  afterAll(async () => {
    await runner.close();
    await Promise.all([first.close(), added.close()]);
  });

  it('adding a host after AlwaysThisProject asks again; denied, the new host is never reached', async () => {
    const { root, capRoot } = await tempProject('capsule-netgrant-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const dir = path.join(capRoot, 'fetcher');
    await cp(EXAMPLE, dir, { recursive: true });
    const manifest = JSON.parse(await readFile(path.join(dir, 'capability.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    // An IP literal names its own (loopback) address: how a person grants one internal host.
    const grantPorts = async (ports: number[]): Promise<void> => {
      await writeManifest(dir, {
        ...manifest,
        name: 'fetcher',
        grants: { network: ports.map((p) => ({ host: '127.0.0.1', ports: [p] })) },
      });
    };
    await grantPorts([first.port]);

    const answers: AskAnswer[] = [];
    const asked: PromptQuestion[] = [];
    const prompter: Prompter = {
      interactive: true,
      ask: (q) => (asked.push(q), Promise.resolve(answers.shift() ?? 'Deny')),
    };
    const audit = new MemoryAuditSink();
    const gate = await PermissionEngine.create({
      projectRoot: root,
      prompter,
      audit,
    });
    const executor = new Executor({
      registry: new Registry({
        roots: ['capabilities'],
        projectRoot: root,
        protectedPaths: [path.join(root, 'capsule.json')],
      }),
      gate,
      runners: [runner],
    });
    const fetch = (port: number): ReturnType<Executor['run']> =>
      executor.run('fetcher', { url: `http://127.0.0.1:${port}/` });

    // The person sees the host and allows it for the project.
    answers.push('AlwaysThisProject');
    const one = await fetch(first.port);
    expect(one.result.stdout).toContain('first host');
    expect(asked).toHaveLength(1);
    expect(asked[0]?.ceiling.ceiling).toBe('project');
    expect(asked[0]?.ceiling.reason).toContain(`127.0.0.1:${first.port}`);
    // The grant holds for the same content: no question.
    expect((await fetch(first.port)).result.stdout).toContain('first host');
    expect(asked).toHaveLength(1);
    const network = audit.events.filter((e) => e.tool === 'network');
    expect(network).toHaveLength(2);
    expect(network[0]).toMatchObject({
      decision: 'allow',
      key: `network:127.0.0.1:${first.port}`,
      network: { method: 'GET', host: '127.0.0.1' },
    });
    expect(network[0]?.network?.bytesIn).toBeGreaterThan(0);

    // The agent adds a host. Nobody approves (Deny): refused, and the new listener sees nothing.
    await grantPorts([first.port, added.port]);
    await expect(fetch(added.port)).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(asked).toHaveLength(2);
    expect(asked[1]?.note).toMatch(/other content/);
    expect(asked[1]?.ceiling.reason).toContain(`127.0.0.1:${added.port}`);
    expect(added.connections).toBe(0);

    // A person approves it once: now it is reached.
    answers.push('Once');
    expect((await fetch(added.port)).result.stdout).toContain('added host');
    expect(added.connections).toBe(1);
  });
});
