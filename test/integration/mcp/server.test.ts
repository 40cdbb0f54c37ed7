import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import {
  ElicitRequestSchema,
  type ElicitRequest,
  type ElicitResult,
} from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import { CapsuleMcpServer, toolResultOf } from '../../../src/mcp/server.js';
import { emptyResult } from '../../../src/runners/types.js';
import type { Componentize } from '../../../src/tools/ports.js';
import { writeCapability } from '../../helpers/capability.js';
import { agentFixture } from '../../helpers/agent-fixture.js';

const open: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of open.splice(0)) await close();
});

async function connect(options: {
  answer?: (p: ElicitRequest['params']) => ElicitResult;
  profile?: string;
  setup?: (capRoot: string) => Promise<void>;
  componentize?: Componentize;
}) {
  let capRoot = '';
  const server = new CapsuleMcpServer({
    version: 'test',
    openSession: async (hooks) => {
      const f = await agentFixture({
        prompter: hooks.prompter,
        approvePlan: hooks.approvePlan,
        profile: options.profile,
        componentize: options.componentize,
      });
      capRoot = f.capRoot;
      await options.setup?.(f.capRoot);
      return f.session;
    },
  });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.start(serverSide);
  const client = new Client(
    { name: 't', version: '1' },
    { capabilities: options.answer ? { elicitation: {} } : {} },
  );
  const elicited: ElicitRequest['params'][] = [];
  if (options.answer) {
    const answer = options.answer;
    client.setRequestHandler(ElicitRequestSchema, async (r) => {
      elicited.push(r.params);
      return answer(r.params);
    });
  }
  await client.connect(clientSide);
  open.push(async () => {
    await client.close();
    await server.close();
  });
  return { client, elicited, capRoot: () => capRoot };
}

const fails = (capRoot: string) =>
  writeCapability(
    capRoot,
    'fails',
    {},
    { 'run.sh': 'echo partial; echo "boom: bad input" >&2; exit 3\n' },
  ).then(() => undefined);

describe('MCP server (in-memory transport)', () => {
  it('an Ask becomes an elicitation; a shell capability is never offered "this project"; a session answer is remembered', async () => {
    const c = await connect({
      answer: () => ({ action: 'accept', content: { decision: 'AlwaysThisSession' } }),
      setup: fails,
    });
    const r1 = await c.client.callTool({ name: 'run_capability', arguments: { name: 'fails' } });
    expect(c.elicited).toHaveLength(1);
    const schema = (c.elicited[0] as { requestedSchema?: unknown } | undefined)?.requestedSchema as {
      properties: { decision: { oneOf: Array<{ const: string }> } };
    };
    expect(schema.properties.decision.oneOf.map((o) => o.const)).toEqual([
      'Once',
      'Uses',
      'Duration',
      'AlwaysThisSession',
      'Deny',
      'DenyThisSession',
      'DenyAlways',
    ]);
    expect(c.elicited[0]?.message).toMatch(/run_capability:fails[\s\S]*Not sandboxed/);
    // A failed run is an isError result with the exit code and stderr.
    expect(r1.isError).toBe(true);
    expect((r1.content as Array<{ text: string }>)[0]?.text).toMatch(
      /exited with code 3[\s\S]*boom: bad input/,
    );
    await c.client.callTool({ name: 'run_capability', arguments: { name: 'fails' } });
    expect(c.elicited).toHaveLength(1);
  });

  it('a declined elicitation is a denial', async () => {
    const c = await connect({ answer: () => ({ action: 'decline' }), setup: fails });
    const r = await c.client.callTool({ name: 'run_capability', arguments: { name: 'fails' } });
    expect(r.isError).toBe(true);
    expect((r.content as Array<{ text: string }>)[0]?.text).toMatch(
      /^PERMISSION_DENIED: .*run_capability:fails/,
    );
  });

  it('a client without elicitation gets a clear denial that says how to grant', async () => {
    const c = await connect({ setup: fails });
    const r = await c.client.callTool({ name: 'run_capability', arguments: { name: 'fails' } });
    expect(r.isError).toBe(true);
    const text = (r.content as Array<{ text: string }>)[0]?.text ?? '';
    expect(text).toMatch(/cannot ask a person \(no elicitation\)/);
    expect(text).toContain("capsule mcp --grant 'run_capability:fails'");
  });

  it('an unknown or hidden tool is a protocol error; bad arguments are an isError naming the field', async () => {
    const c = await connect({ profile: 'explore' });
    await expect(c.client.callTool({ name: 'no_such_tool', arguments: {} })).rejects.toThrow(
      /-32602.*Unknown tool: no_such_tool/,
    );
    await expect(
      c.client.callTool({ name: 'write_file', arguments: { path: 'a', content: 'b' } }),
    ).rejects.toThrow(/Unknown tool: write_file/);
    const r = await c.client.callTool({ name: 'read_file', arguments: { path: 42 } });
    expect(r.isError).toBe(true);
    expect((r.content as Array<{ text: string }>)[0]?.text).toMatch(
      /^USAGE: Invalid arguments for read_file: path/,
    );
  });

  it('exit_plan_mode asks the human through elicitation', async () => {
    const c = await connect({ answer: () => ({ action: 'accept', content: { decision: 'approve' } }) });
    await c.client.callTool({ name: 'enter_plan_mode', arguments: {} });
    const denied = await c.client.callTool({
      name: 'write_file',
      arguments: { path: 'a.txt', content: 'x' },
    });
    expect((denied.content as Array<{ text: string }>)[0]?.text).toMatch(/Plan mode.*exit_plan_mode/);
    const r = await c.client.callTool({ name: 'exit_plan_mode', arguments: { plan: '1. write a.txt' } });
    expect(JSON.parse((r.content as Array<{ text: string }>)[0]?.text ?? '{}')).toMatchObject({
      approved: true,
      mode: 'edit',
    });
    expect(c.elicited[0]?.message).toContain('1. write a.txt');
    const ok = await c.client.callTool({ name: 'write_file', arguments: { path: 'a.txt', content: 'x' } });
    expect(ok.isError).toBeFalsy();
    expect(c.elicited).toHaveLength(1);
  });

  it('sends progress notifications for componentizing', async () => {
    const c = await connect({
      answer: () => ({ action: 'accept', content: { decision: 'Once' } }),
      componentize: async (_s, o) => {
        o.onProgress?.('quickjs snapshot');
        return new Uint8Array([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0]);
      },
    });
    const seen: string[] = [];
    const r = await c.client.callTool(
      {
        name: 'generate_wasm_capability',
        arguments: { name: 'w', description: 'd', source: 'export function run(i){return i}' },
      },
      undefined,
      { onprogress: (p) => seen.push(p.message ?? '') },
    );
    expect(r.isError).toBeFalsy();
    expect(seen).toContain('quickjs snapshot');
    expect(seen.at(-1)).toBe('stored w');
  });
});

describe('toolResultOf', () => {
  it('marks timeouts, cancellations and non-zero exits as errors and keeps successes plain', () => {
    const ok = { ...emptyResult('shell'), exitCode: 0, stdout: 'hi' };
    expect(toolResultOf('run_capability', ok)).toMatchObject({ content: [{ type: 'text', text: 'hi' }] });
    expect(toolResultOf('run_capability', ok).isError).toBeUndefined();
    expect(toolResultOf('run_capability', { ...ok, timedOut: true, exitCode: null }).isError).toBe(true);
    expect(toolResultOf('run_capability', { ...ok, canceled: true }).isError).toBe(true);
    expect(toolResultOf('run_command', { ...ok, exitCode: 1, stderr: 'nope' })).toMatchObject({
      isError: true,
    });
  });
});
