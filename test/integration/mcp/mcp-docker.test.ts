import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { tempProject } from '../../helpers/capability.js';
import { eventually } from '../../helpers/eventually.js';
import { choose, connectCapsule, textOf, type McpHarness } from './mcp-client.js';

// Docker through MCP: needs the running engine that scripts/provision-docker.sh starts.

const harnesses: McpHarness[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

async function containersOf(name: string): Promise<string[]> {
  const r = await execa('docker', ['ps', '-q', '--filter', `label=capsule.capability=${name}`], {
    reject: false,
  });
  return r.stdout.split('\n').filter(Boolean);
}

describe('capsule mcp with docker capabilities', () => {
  it('generates a docker capability, runs it with a project grant, and a cancel removes the container', async () => {
    const { root } = await tempProject('capsule-mcp-docker-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const h = await connectCapsule({
      cwd: root,
      answer: (p) =>
        choose(p.message.includes('generate_capability') ? 'AlwaysThisSession' : 'AlwaysThisProject'),
    });
    harnesses.push(h);
    const suffix = `${process.pid}-${Date.now()}`;
    const gen = await h.client.callTool({
      name: 'generate_docker_capability',
      arguments: { name: `echo-${suffix}`, description: 'echoes stdin', script: 'cat\n', image: 'busybox' },
    });
    expect(gen.isError, textOf(gen)).toBeFalsy();
    expect(gen.structuredContent).toMatchObject({ environment: 'docker', sandboxed: true });
    const run = await h.client.callTool(
      { name: 'run_capability', arguments: { name: `echo-${suffix}`, input: { a: 1 } } },
      undefined,
      { timeout: 120_000 },
    );
    expect(textOf(run)).toBe('{"a":1}');
    // A hardened docker capability may be approved for the project (it was offered and saved).
    const offered = (
      h.elicitations.at(-1) as unknown as {
        requestedSchema: { properties: { decision: { oneOf: Array<{ const: string }> } } };
      }
    ).requestedSchema.properties.decision.oneOf.map((o) => o.const);
    expect(offered).toContain('AlwaysThisProject');

    const slow = `slow-${suffix}`;
    const made = await h.client.callTool({
      name: 'generate_docker_capability',
      arguments: { name: slow, description: 'sleeps', script: 'sleep 300\n', limits: { timeoutMs: 120_000 } },
    });
    expect(made.isError, textOf(made)).toBeFalsy();
    const ac = new AbortController();
    const pending = h.client.callTool({ name: 'run_capability', arguments: { name: slow } }, undefined, {
      signal: ac.signal,
      timeout: 120_000,
    });
    // Judged below; if the test fails first, the close in afterEach must not leave the rejection unhandled.
    void pending.catch(() => undefined);
    let running: string[] = [];
    await eventually(
      async () => (running = await containersOf(slow)).length > 0,
      'the capability container to be running',
      { timeoutMs: 90_000, intervalMs: 100 },
    );
    expect(running.length).toBe(1);
    ac.abort();
    await expect(pending).rejects.toThrow();
    await eventually(
      async () => (running = await containersOf(slow)).length === 0,
      'the capability container to be gone',
      { timeoutMs: 60_000, intervalMs: 100 },
    ).catch(() => undefined);
    expect(running).toEqual([]);
  });
});
