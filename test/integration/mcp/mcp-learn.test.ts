import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { ElicitRequest, ElicitResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';
import { FETCHER, pongListener, type PongListener } from '../../helpers/learn-fixture.js';
import { choose, connectCapsule, textOf, type McpHarness } from './mcp-client.js';

// learn_capability end to end: the real MCP SDK client over stdio against the built `capsule mcp`. Judged
// by effect: the listener's listener.hits (did anything run) and the manifest's bytes (was anything written).

const harnesses: McpHarness[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

let listener: PongListener;
let port = 0;

beforeAll(async () => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the MCP integration tests');
  listener = await pongListener();
  port = listener.port;
});
afterAll(() => listener.close());

async function project(): Promise<{ root: string; manifest: string; read: () => Promise<string> }> {
  const { root, capRoot } = await tempProject('capsule-mcp-learn-');
  await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  await mkdir(path.join(root, 'data'));
  await writeFile(path.join(root, 'data', 'in.txt'), 'hello\n');
  await mkdir(path.join(root, 'out'));
  const dir = await writeCapability(
    capRoot,
    'fetcher',
    { entry: 'run.mjs', interpreter: 'node' },
    { 'run.mjs': FETCHER },
  );
  const file = path.join(dir, 'capability.json');
  return { root, manifest: await readFile(file, 'utf8'), read: () => readFile(file, 'utf8') };
}

async function connect(...args: Parameters<typeof connectCapsule>): Promise<McpHarness> {
  const h = await connectCapsule(...args);
  harnesses.push(h);
  return h;
}

const isPermission = (p: ElicitRequest['params']): boolean => p.message.includes('permission needed');

/** Answers every permission question with `permission`, and the write question with `write`. */
function answers(permission: Parameters<typeof choose>[0], write: 'write' | 'keep' | 'decline') {
  return (p: ElicitRequest['params']): ElicitResult =>
    isPermission(p)
      ? choose(permission)
      : write === 'decline'
        ? { action: 'decline' }
        : { action: 'accept', content: { decision: write } };
}

interface Structured {
  proposal: { grants: unknown; written: string | null; target: { name: string } };
  proof: { ok: boolean };
  message?: string;
}

async function learn(h: McpHarness, args: Record<string, unknown>) {
  // tools/list first: the SDK client then checks structuredContent against the tool's outputSchema.
  await h.client.listTools();
  return h.client.callTool({ name: 'learn_capability', arguments: args }, undefined, { timeout: 120_000 });
}

const PROPOSED = () => ({
  fs: [
    { path: 'data', mode: 'ro' },
    { path: 'out', mode: 'rw' },
  ],
  network: [{ host: '127.0.0.1', ports: [port] }],
  env: [],
});

describe('learn_capability over MCP', () => {
  it('is listed with an outputSchema, and asks nothing of its own: each run asks run_capability:<name>', async () => {
    const p = await project();
    const h = await connect({ cwd: p.root, answer: answers('Once', 'keep') });
    const tool = (await h.client.listTools()).tools.find((t) => t.name === 'learn_capability');
    expect(tool?.outputSchema).toMatchObject({
      type: 'object',
      required: ['proposal', 'observed', 'outside', 'proof'],
    });
    expect(tool?.inputSchema).toMatchObject({ required: ['name'] });
    const before = listener.hits;
    const r = await learn(h, { name: 'fetcher', inputs: [{ port }] });
    expect(r.isError, textOf(r)).toBeFalsy();
    const doc = r.structuredContent as unknown as Structured;
    expect(doc.proposal.grants).toEqual(PROPOSED());
    expect(doc.proof.ok).toBe(true);
    expect(doc.proposal.written).toBeNull();
    // The learning run and the proof: two runs, each decided by the gate on the run key.
    expect(listener.hits - before).toBe(2);
    const keys = h.elicitations.map((e) => /permission needed: (\S+)/.exec(e.message)?.[1]);
    expect(keys.length).toBeGreaterThan(0);
    expect(new Set(keys)).toEqual(new Set(['run_capability:fetcher']));
    // write was not asked for: no write question, and the manifest is as it was.
    expect(h.elicitations.filter((e) => !isPermission(e))).toHaveLength(0);
    expect(await p.read()).toBe(p.manifest);
  });

  it('write: true writes the proved grants only on the person’s yes to an elicitation', async () => {
    const p = await project();
    const yes = await connect({ cwd: p.root, answer: answers('AlwaysThisSession', 'write') });
    const r = await learn(yes, { name: 'fetcher', inputs: [{ port }], write: true });
    expect(r.isError, textOf(r)).toBeFalsy();
    const doc = r.structuredContent as unknown as Structured;
    expect(doc.proposal.written).toMatch(/fetcher\/capability\.json$/);
    const question = yes.elicitations.filter((e) => !isPermission(e));
    expect(question).toHaveLength(1);
    expect(question[0]?.message).toContain('out');
    const written = JSON.parse(await p.read()) as { grants: unknown };
    expect(written.grants).toEqual(PROPOSED());
  });

  it('a “no” or a declined elicitation writes nothing', async () => {
    for (const write of ['keep', 'decline'] as const) {
      const p = await project();
      const h = await connect({ cwd: p.root, answer: answers('AlwaysThisSession', write) });
      const r = await learn(h, { name: 'fetcher', inputs: [{ port }], write: true });
      const doc = r.structuredContent as unknown as Structured;
      expect(doc.proof.ok, write).toBe(true);
      expect(doc.proposal.written, write).toBeNull();
      expect(doc.message, write).toMatch(/Not written/);
      expect(await p.read(), write).toBe(p.manifest);
    }
  });

  it('a client without elicitation: denied without a grant (nothing runs); with one, it never writes', async () => {
    const p = await project();
    const before = listener.hits;
    const denied = await learn(await connect({ cwd: p.root }), {
      name: 'fetcher',
      inputs: [{ port }],
      write: true,
    });
    expect(denied.isError).toBe(true);
    expect(textOf(denied)).toContain('run_capability:fetcher');
    expect(listener.hits - before).toBe(0);
    expect(existsSync(path.join(p.root, 'out', 'res.txt'))).toBe(false);

    const granted = await connect({ cwd: p.root, args: ['--grant', 'run_capability:fetcher'] });
    const r = await learn(granted, { name: 'fetcher', inputs: [{ port }], write: true });
    expect(r.isError, textOf(r)).toBeFalsy();
    const doc = r.structuredContent as unknown as Structured;
    expect(doc.proof.ok).toBe(true);
    expect(listener.hits - before).toBe(2);
    expect(doc.proposal.written).toBeNull();
    expect(await p.read()).toBe(p.manifest);
  });

  it('the person denies the run: nothing runs and nothing is written', async () => {
    const p = await project();
    const h = await connect({ cwd: p.root, answer: answers('Deny', 'write') });
    const before = listener.hits;
    const r = await learn(h, { name: 'fetcher', inputs: [{ port }], write: true });
    expect(r.isError).toBe(true);
    expect(listener.hits - before).toBe(0);
    expect(existsSync(path.join(p.root, 'out', 'res.txt'))).toBe(false);
    expect(h.elicitations.filter((e) => !isPermission(e))).toHaveLength(0);
    expect(await p.read()).toBe(p.manifest);
  });

  it('--no-prompt: never asked, never written, even with the run granted and a client that could answer', async () => {
    const p = await project();
    const h = await connect({
      cwd: p.root,
      args: ['--no-prompt', '--grant', 'run_capability:fetcher'],
      answer: answers('Once', 'write'),
    });
    const r = await learn(h, { name: 'fetcher', inputs: [{ port }], write: true });
    const doc = r.structuredContent as unknown as Structured;
    expect(doc.proof.ok, textOf(r)).toBe(true);
    expect(doc.proposal.written).toBeNull();
    expect(h.elicitations).toHaveLength(0);
    expect(await p.read()).toBe(p.manifest);
  });

  it('the gate decides each run as for run_capability: plan mode and a deny rule on it stop learning before anything runs', async () => {
    const plan = await project();
    const before = listener.hits;
    const inPlan = await connect({
      cwd: plan.root,
      args: ['--mode', 'plan', '--grant', 'run_capability:fetcher'],
      answer: answers('Once', 'write'),
    });
    const r = await learn(inPlan, { name: 'fetcher', inputs: [{ port }], write: true });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/plan/i);
    const denied = await project();
    await writeFile(
      path.join(denied.root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, permissions: { deny: ['run_capability(fetcher)'] } }),
    );
    const ruled = await connect({
      cwd: denied.root,
      args: ['--grant', 'run_capability:fetcher'],
      answer: answers('Once', 'write'),
    });
    const d = await learn(ruled, { name: 'fetcher', inputs: [{ port }], write: true });
    expect(d.isError).toBe(true);
    expect(textOf(d)).toContain('run_capability(fetcher)');
    expect(listener.hits - before).toBe(0);
    for (const p of [plan, denied]) {
      expect(existsSync(path.join(p.root, 'out', 'res.txt'))).toBe(false);
      expect(await p.read()).toBe(p.manifest);
    }
  });

  it('promote: docker proves it in a container and, on a yes, writes NAME-docker beside it (read-only: sandboxed)', async () => {
    const { root, capRoot } = await tempProject('capsule-mcp-learn-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    await mkdir(path.join(root, 'data'));
    await writeFile(path.join(root, 'data', 'in.txt'), 'hello\n');
    await writeCapability(capRoot, 'reader', {}, { 'run.sh': 'cat "$CAPSULE_PROJECT_DIR/data/in.txt"\n' });
    const h = await connect({ cwd: root, answer: answers('AlwaysThisSession', 'write') });
    const r = await learn(h, { name: 'reader', inputs: [{}], promote: 'docker', write: true });
    expect(r.isError, textOf(r)).toBeFalsy();
    const doc = r.structuredContent as unknown as Structured & {
      proposal: { ceiling: { sandboxed: boolean } };
    };
    expect(doc.proposal.target.name).toBe('reader-docker');
    expect(doc.proposal.ceiling.sandboxed).toBe(true);
    // Each run asked on its own key: the learning run on reader, the proof in docker on reader-docker.
    const keys = new Set(h.elicitations.map((e) => /permission needed: (\S+)/.exec(e.message)?.[1]));
    expect(keys).toEqual(new Set(['run_capability:reader', 'run_capability:reader-docker', undefined]));
    expect(h.elicitations.find((e) => !isPermission(e))?.message).toContain('Sandboxed');
    const promoted = JSON.parse(
      await readFile(path.join(capRoot, 'reader-docker', 'capability.json'), 'utf8'),
    ) as { environment: string; grants: unknown };
    expect(promoted.environment).toBe('docker');
    expect(promoted.grants).toEqual({ fs: [{ path: 'data', mode: 'ro' }], network: [], env: [] });
  });
});
