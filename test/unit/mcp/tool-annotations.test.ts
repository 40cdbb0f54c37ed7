import { describe, expect, it } from 'vitest';
import { parseManifest } from '../../../src/manifest/parse.js';
import type { Capability } from '../../../src/manifest/types.js';
import { defaultIsolation } from '../../../src/executor/isolation.js';
import {
  CAPABILITY_TOOL_PREFIX,
  capabilityOfToolName,
  capabilityResultOf,
  mcpCapabilityToolOf,
  mcpToolOf,
} from '../../../src/mcp/server.js';
import { capabilityAnnotations } from '../../../src/mcp/tool-annotations.js';
import { emptyResult } from '../../../src/runners/types.js';
import { createToolCatalog, TOOL_NAMES } from '../../../src/tools/catalog.js';

function capability(manifest: Record<string, unknown>, rw: string[] = []): Capability {
  const parsed = parseManifest(
    JSON.stringify({ schemaVersion: 1, name: 'c', description: 'd', entry: 'run.sh', ...manifest }),
  );
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
  return {
    name: 'c',
    environment: parsed.manifest.environment,
    manifest: parsed.manifest,
    dir: '/x/c',
    manifestPath: '/x/c/capability.json',
    entryPath: '/x/c/run.sh',
    contentHash: `sha256:${'a'.repeat(64)}`,
    root: '/x',
    fsGrants: rw.map((p) => ({ declared: p, hostPath: `/x/${p}`, mode: 'rw' as const })),
  };
}

const hintsOf = (c: Capability) => {
  const a = capabilityAnnotations(c, defaultIsolation(c));
  return { readOnly: a.readOnlyHint, destructive: a.destructiveHint, openWorld: a.openWorldHint };
};

describe('MCP tool annotations', () => {
  it('every catalog tool has a title and all four hints', () => {
    const tools = createToolCatalog({ env: {} }).map(mcpToolOf);
    expect(tools.map((t) => t.name)).toEqual(
      TOOL_NAMES.filter((n) => n !== 'run_subagent' && n !== 'learn_capability'),
    );
    for (const t of tools) {
      expect(t.title, t.name).toBeTruthy();
      expect(Object.keys(t.annotations ?? {}).sort(), t.name).toEqual(
        ['destructiveHint', 'idempotentHint', 'openWorldHint', 'readOnlyHint', 'title'].sort(),
      );
    }
  });

  it('a capability is open-world only when it is a shell capability or reaches the network', () => {
    expect(hintsOf(capability({ environment: 'shell', interpreter: 'sh' }))).toEqual({
      readOnly: false,
      destructive: true,
      openWorld: true,
    });
    expect(hintsOf(capability({ environment: 'wasm', entry: 'c.wasm' }))).toEqual({
      readOnly: true,
      destructive: false,
      openWorld: false,
    });
    const docker = { environment: 'docker', docker: { image: 'capsule/busybox:1' } };
    expect(hintsOf(capability(docker)).openWorld).toBe(false);
    expect(hintsOf(capability({ ...docker, grants: { network: [{ host: 'api.example.test' }] } }))).toEqual({
      readOnly: false,
      destructive: true,
      openWorld: true,
    });
    // docker network "host" is the network, granted or not.
    expect(hintsOf(capability({ ...docker, docker: { image: 'x', network: 'host' } })).openWorld).toBe(true);
  });

  it('a sandboxed capability that writes the host through an rw grant is not read-only', () => {
    expect(hintsOf(capability({ environment: 'wasm', entry: 'c.wasm' }, ['out']))).toEqual({
      readOnly: false,
      destructive: true,
      openWorld: false,
    });
    const privileged = capability({
      environment: 'docker',
      docker: { image: 'capsule/busybox:1', privileged: true },
    });
    expect(hintsOf(privileged).readOnly).toBe(false);
  });

  it('capability tools: prefixed names, a non-object input wrapped, the outputSchema served', () => {
    expect(capabilityOfToolName(`${CAPABILITY_TOOL_PREFIX}read_file`)).toBe('read_file');
    expect(capabilityOfToolName('read_file')).toBeUndefined();
    const c = capability({
      environment: 'wasm',
      entry: 'c.wasm',
      inputSchema: { type: 'string' },
      outputSchema: { type: 'object', properties: { n: { type: 'integer' } } },
    });
    const tool = mcpCapabilityToolOf(c, defaultIsolation(c));
    expect(tool.name).toBe('cap_c');
    expect(tool.inputSchema).toEqual({
      type: 'object',
      properties: { input: { type: 'string' } },
      required: ['input'],
    });
    expect(tool.outputSchema).toEqual({ type: 'object', properties: { n: { type: 'integer' } } });
  });

  it('a capability result: validated output as structuredContent; a failure never carries any', () => {
    const ok = capabilityResultOf('c', {
      ...emptyResult('shell'),
      exitCode: 0,
      stdout: '{"n":1}',
      output: { n: 1 },
    });
    expect(ok.isError).toBeUndefined();
    expect(ok.structuredContent).toEqual({ n: 1 });
    const lied = capabilityResultOf('c', {
      ...emptyResult('shell'),
      exitCode: 0,
      stdout: '{"n":"x"}',
      outputInvalid: 'output.n must be integer',
    });
    expect(lied.isError).toBe(true);
    expect(lied.structuredContent).toBeUndefined();
    const crashed = capabilityResultOf('c', { ...emptyResult('shell'), exitCode: 2 });
    expect(crashed.isError).toBe(true);
    expect(crashed.structuredContent).toBeUndefined();
  });
});

describe('manifest outputSchema', () => {
  it('must describe an object, and is optional', () => {
    expect(
      parseManifest(
        JSON.stringify({ schemaVersion: 1, name: 'c', description: 'd', environment: 'shell', entry: 'r' }),
      ).ok,
    ).toBe(true);
    const bad = parseManifest(
      JSON.stringify({
        schemaVersion: 1,
        name: 'c',
        description: 'd',
        environment: 'shell',
        entry: 'r',
        outputSchema: { type: 'string' },
      }),
    );
    expect(bad.ok).toBe(false);
    if (!bad.ok)
      expect(bad.issues[0]).toMatchObject({
        field: 'outputSchema',
        message: expect.stringMatching(/object/),
      });
  });
});
