import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import {
  ElicitRequestSchema,
  type ElicitRequest,
  type ElicitResult,
} from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import { CapsuleMcpServer } from '../../../src/mcp/server.js';
import type { Clock } from '../../../src/permissions/session-allowlist.js';
import { agentFixture } from '../../helpers/agent-fixture.js';
import { writeCapability } from '../../helpers/capability.js';

const open: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of open.splice(0)) await close();
});

/** The real SDK client over an in-memory transport; `answer` is the person answering elicitations. */
async function connect(answer: (p: ElicitRequest['params']) => ElicitResult, clock?: Clock) {
  let root = '';
  const server = new CapsuleMcpServer({
    version: 'test',
    openSession: async (hooks) => {
      const f = await agentFixture({ prompter: hooks.prompter, approvePlan: hooks.approvePlan, clock });
      root = f.root;
      // A shell capability (not sandboxed: session grants at most) that leaves one line per run.
      await writeCapability(
        f.capRoot,
        'mark',
        {},
        { 'run.sh': `echo ran >> ${JSON.stringify(path.join(f.root, 'marker'))}\n` },
      );
      return f.session;
    },
  });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.start(serverSide);
  const client = new Client({ name: 't', version: '1' }, { capabilities: { elicitation: {} } });
  const elicited: ElicitRequest['params'][] = [];
  client.setRequestHandler(ElicitRequestSchema, (r) => {
    elicited.push(r.params);
    return answer(r.params);
  });
  await client.connect(clientSide);
  open.push(async () => {
    await client.close();
    await server.close();
  });
  const call = () => client.callTool({ name: 'run_capability', arguments: { name: 'mark' } });
  const runs = async (): Promise<number> =>
    (await readFile(path.join(root, 'marker'), 'utf8').catch(() => '')).split('\n').filter((l) => l !== '')
      .length;
  return { client, elicited, call, runs, root: () => root };
}

/** The first elicitation answers with `first`; every later one declines (a denial). */
function firstThenDecline(first: Record<string, string | number>) {
  let n = 0;
  return (): ElicitResult => (n++ === 0 ? { action: 'accept', content: first } : { action: 'decline' });
}

describe('MCP elicitation: grant lifetimes', () => {
  it('offers once, a number of uses, a time and this session, with the fields they need', async () => {
    const c = await connect(firstThenDecline({ decision: 'Once' }));
    await c.call();
    const schema = (c.elicited[0] as { requestedSchema?: unknown } | undefined)?.requestedSchema as {
      properties: Record<string, { oneOf?: Array<{ const: string }>; type?: string }>;
    };
    expect(schema.properties.decision?.oneOf?.map((o) => o.const)).toEqual([
      'Once',
      'Uses',
      'Duration',
      'AlwaysThisSession',
      'Deny',
      'DenyThisSession',
      'DenyAlways',
    ]);
    expect(schema.properties.uses?.type).toBe('integer');
    expect(schema.properties.minutes?.type).toBe('integer');
  });

  it('"once": the capability runs once, the second call asks again (and is declined: it does not run)', async () => {
    const c = await connect(firstThenDecline({ decision: 'Once' }));
    expect((await c.call()).isError).not.toBe(true);
    expect(await c.runs()).toBe(1);
    const second = await c.call();
    expect(c.elicited).toHaveLength(2);
    expect(second.isError).toBe(true);
    expect(await c.runs()).toBe(1);
  });

  it('"3 uses": three runs without asking again, the fourth asks', async () => {
    const c = await connect(firstThenDecline({ decision: 'Uses', uses: 3 }));
    for (let i = 0; i < 3; i++) await c.call();
    expect(c.elicited).toHaveLength(1);
    expect(await c.runs()).toBe(3);
    const fourth = await c.call();
    expect(c.elicited).toHaveLength(2);
    expect(fourth.isError).toBe(true);
    expect(await c.runs()).toBe(3);
  });

  it('three concurrent calls on "2 uses" run twice, never three times (the last use is taken once)', async () => {
    const c = await connect(firstThenDecline({ decision: 'Uses', uses: 2 }));
    await c.call();
    await Promise.all([c.call(), c.call()]);
    expect(await c.runs()).toBe(2);
    expect(c.elicited).toHaveLength(2);
  });

  it('"10 minutes": runs without asking until the (injected) clock passes 10 minutes, then asks', async () => {
    let now = 1_700_000_000_000;
    const c = await connect(firstThenDecline({ decision: 'Duration', minutes: 10 }), { now: () => now });
    await c.call();
    now += 9 * 60_000;
    await c.call();
    expect(c.elicited).toHaveLength(1);
    expect(await c.runs()).toBe(2);
    now += 60_000;
    const late = await c.call();
    expect(c.elicited).toHaveLength(2);
    expect(late.isError).toBe(true);
    expect(await c.runs()).toBe(2);
  });

  it('a lifetime choice without a valid number is a denial, not a session grant', async () => {
    const answers: Array<Record<string, string | number>> = [
      { decision: 'Uses' },
      { decision: 'Uses', uses: 0 },
      { decision: 'Duration', minutes: -5 },
    ];
    for (const content of answers) {
      const c = await connect(() => ({ action: 'accept', content }));
      const r = await c.call();
      expect(r.isError).toBe(true);
      expect(await c.runs()).toBe(0);
    }
  });

  it('"deny always" is saved as a deny rule: the call does not run and is not asked again', async () => {
    const c = await connect(firstThenDecline({ decision: 'DenyAlways' }));
    expect((await c.call()).isError).toBe(true);
    const saved = JSON.parse(await readFile(path.join(c.root(), 'capsule.json'), 'utf8')) as {
      permissions?: { deny?: string[] };
    };
    expect(saved.permissions?.deny).toEqual(['run_capability(mark)']);
    const again = await c.call();
    expect(again.isError).toBe(true);
    expect(c.elicited).toHaveLength(1);
    expect(await c.runs()).toBe(0);
  });

  it('control: "this session" keeps allowing (the lifetime tests above can fail)', async () => {
    const c = await connect(firstThenDecline({ decision: 'AlwaysThisSession' }));
    for (let i = 0; i < 4; i++) await c.call();
    expect(c.elicited).toHaveLength(1);
    expect(await c.runs()).toBe(4);
  });
});
