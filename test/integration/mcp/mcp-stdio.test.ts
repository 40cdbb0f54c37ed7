import { existsSync } from 'node:fs';
import { mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { READ_ONLY_TOOL_NAMES } from '../../../src/tools/catalog.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';
import { processesWith, survivors } from '../../helpers/processes.js';
import { choose, connectCapsule, textOf, type McpHarness } from './mcp-client.js';
import { eventually } from '../../helpers/eventually.js';

// End to end: the real MCP SDK client over stdio against the built `capsule mcp` (npm run build first).

const harnesses: McpHarness[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

async function project(): Promise<{ root: string; capRoot: string }> {
  const p = await tempProject('capsule-mcp-');
  await writeFile(path.join(p.root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  return p;
}

async function connect(...args: Parameters<typeof connectCapsule>): Promise<McpHarness> {
  const h = await connectCapsule(...args);
  harnesses.push(h);
  return h;
}

const keyOf = (message: string) => /permission needed: (.*)/.exec(message)?.[1] ?? message;

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the MCP integration tests');
});

describe('capsule mcp over stdio', () => {
  it('lists the tools of each profile', async () => {
    const { root } = await project();
    const expected: Record<string, string[]> = {
      explore: [...READ_ONLY_TOOL_NAMES, 'run_subagent'],
      reviewer: [...READ_ONLY_TOOL_NAMES, 'run_command'],
      plan: [...READ_ONLY_TOOL_NAMES, 'enter_plan_mode', 'exit_plan_mode', 'sleep', 'run_subagent'],
      subagent: [...READ_ONLY_TOOL_NAMES],
    };
    for (const [profile, names] of Object.entries(expected)) {
      const h = await connect({ cwd: root, args: ['--profile', profile] });
      expect(`${profile}: ${(await h.client.listTools()).tools.map((t) => t.name).join(',')}`).toBe(
        `${profile}: ${names.join(',')}`,
      );
      await h.close();
    }
    const build = await connect({ cwd: root });
    const tools = (await build.client.listTools()).tools;
    expect(tools).toHaveLength(19);
    const write = tools.find((t) => t.name === 'write_file');
    expect(write?.inputSchema).toMatchObject({ type: 'object', required: ['path', 'content'] });
    expect(write?.annotations?.readOnlyHint).toBe(false);
  });

  it('an unknown profile fails to start with a clear message', async () => {
    const { root } = await project();
    await expect(connectCapsule({ cwd: root, args: ['--profile', 'nobody'] })).rejects.toThrow();
  });

  it('generates a wasm capability from JS, runs it with a project grant, and asks again after the source changes', async () => {
    const { root, capRoot } = await project();
    const h = await connect({
      cwd: root,
      answer: (p) =>
        choose(p.message.includes('generate_capability') ? 'AlwaysThisSession' : 'AlwaysThisProject'),
    });
    const progress: string[] = [];
    const gen = await h.client.callTool(
      {
        name: 'generate_wasm_capability',
        arguments: {
          name: 'upper',
          description: 'upper-cases input.text',
          source: 'export function run(input) { return JSON.parse(input).text.toUpperCase(); }',
          inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
        },
      },
      undefined,
      { onprogress: (p) => progress.push(p.message ?? ''), timeout: 120_000 },
    );
    expect(gen.isError, textOf(gen)).toBeFalsy();
    const made = gen.structuredContent as { contentHash: string; sandboxed: boolean };
    expect(made.sandboxed).toBe(true);
    expect(progress.some((m) => m.includes('componentiz'))).toBe(true);
    expect((await readdir(path.join(capRoot, 'upper'))).sort()).toEqual([
      'capability.json',
      'capability.wasm',
      'source.js',
    ]);

    const run = async () =>
      h.client.callTool(
        { name: 'run_capability', arguments: { name: 'upper', input: { text: 'hi' } } },
        undefined,
        { timeout: 60_000 },
      );
    const first = await run();
    expect(textOf(first)).toBe('HI');
    const runAsks = () =>
      h.elicitations.map((e) => keyOf(e.message)).filter((k) => k === 'run_capability:upper');
    expect(runAsks()).toHaveLength(1);
    // "this project" was offered (wasm is sandboxed) and saved, bound to the content hash.
    const config = JSON.parse(await readFile(path.join(root, 'capsule.json'), 'utf8'));
    expect(config.allowlist['run_capability:upper']).toMatchObject({
      level: 'AlwaysThisProject',
      contentHash: made.contentHash,
    });

    expect(textOf(await run())).toBe('HI');
    expect(runAsks()).toHaveLength(1);

    // A new session reads the project grant: no question.
    const h2 = await connect({ cwd: root, answer: () => choose('Deny') });
    expect(
      textOf(
        await h2.client.callTool(
          { name: 'run_capability', arguments: { name: 'upper', input: { text: 'x' } } },
          undefined,
          { timeout: 60_000 },
        ),
      ),
    ).toBe('X');
    expect(h2.elicitations).toHaveLength(0);

    // Change the source: the grant no longer applies.
    const regen = await h.client.callTool(
      {
        name: 'generate_wasm_capability',
        arguments: {
          name: 'upper',
          overwrite: true,
          description: 'now lower',
          source: 'export function run(input) { return JSON.parse(input).text.toLowerCase(); }',
        },
      },
      undefined,
      { timeout: 120_000 },
    );
    expect(regen.isError, textOf(regen)).toBeFalsy();
    expect(textOf(await run())).toBe('hi');
    expect(runAsks()).toHaveLength(2);
  });

  it('run_command: a session grant covers the program, a compound command is asked again', async () => {
    const { root } = await project();
    const h = await connect({ cwd: root, answer: () => choose('AlwaysThisSession') });
    const call = (command: string) => h.client.callTool({ name: 'run_command', arguments: { command } });
    expect(textOf(await call('echo one'))).toBe('one\n');
    expect(textOf(await call('echo two'))).toBe('two\n');
    expect(h.elicitations.map((e) => keyOf(e.message))).toEqual(['run_command:echo']);
    // run_command is never offered "this project" (ceiling rule).
    const options = (
      h.elicitations[0] as unknown as {
        requestedSchema: { properties: { decision: { oneOf: Array<{ const: string }> } } };
      }
    ).requestedSchema.properties.decision.oneOf.map((o) => o.const);
    expect(options).toEqual([
      'Once',
      'Uses',
      'Duration',
      'AlwaysThisSession',
      'Deny',
      'DenyThisSession',
      'DenyAlways',
    ]);
    await call('echo three && touch marker');
    expect(h.elicitations.map((e) => keyOf(e.message))).toEqual([
      'run_command:echo',
      'run_command:echo three && touch marker',
    ]);
    const failed = await call('echo out; echo err >&2; exit 4');
    expect(failed.isError).toBe(true);
    expect(textOf(failed)).toMatch(/exited with code 4[\s\S]*err/);
  });

  it('a client without elicitation is denied with a message that says how to grant; --grant then works', async () => {
    const { root, capRoot } = await project();
    await writeCapability(capRoot, 'hello', {}, { 'run.sh': 'echo hello\n' });
    const h = await connect({ cwd: root });
    const r = await h.client.callTool({ name: 'run_capability', arguments: { name: 'hello' } });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(
      /PERMISSION_DENIED[\s\S]*run_capability:hello[\s\S]*cannot ask a person \(no elicitation\)[\s\S]*capsule mcp --grant 'run_capability:hello'/,
    );
    await h.close();
    const granted = await connect({ cwd: root, args: ['--grant', 'run_capability:hello'] });
    expect(
      textOf(await granted.client.callTool({ name: 'run_capability', arguments: { name: 'hello' } })),
    ).toBe('hello\n');
  });

  it('a cancellation notification aborts the run: the process tree is gone', async () => {
    const { root, capRoot } = await project();
    // Pids printed inside the run's pid namespace mean nothing here: the tree is found by a token.
    const token = path.join(root, 'slow-tree');
    const started = path.join(root, 'started');
    await writeCapability(
      capRoot,
      'slow',
      { limits: { timeoutMs: 60_000 } },
      {
        // The marker is written by the process that carries the token, so once it exists that process does.
        'run.sh': `sh -c 'echo up > "$1"; sleep 300' ${token} ${started} & wait\n`,
      },
    );
    const h = await connect({ cwd: root, args: ['--grant', 'run_capability:slow'] });
    const ac = new AbortController();
    const pending = h.client.callTool({ name: 'run_capability', arguments: { name: 'slow' } }, undefined, {
      signal: ac.signal,
    });
    // Judged below; if the test fails first, the close in afterEach must not leave the rejection unhandled.
    void pending.catch(() => undefined);
    await eventually(() => existsSync(started), 'the capability to start', { timeoutMs: 60_000 });
    expect(processesWith(token).length).toBeGreaterThan(0);
    ac.abort();
    await expect(pending).rejects.toThrow();
    expect(await survivors(token)).toEqual([]);
    // The server is still serving.
    expect((await h.client.listTools()).tools.length).toBeGreaterThan(0);
  });

  it('the sub-agent profile sees only read-only tools and cannot spawn', async () => {
    const { root } = await project();
    const h = await connect({
      cwd: root,
      args: ['--profile', 'subagent'],
      answer: () => choose('AlwaysThisSession'),
    });
    expect((await h.client.listTools()).tools.map((t) => t.name)).toEqual([...READ_ONLY_TOOL_NAMES]);
    for (const name of [
      'run_subagent',
      'write_file',
      'run_command',
      'run_capability',
      'generate_wasm_capability',
    ]) {
      await expect(h.client.callTool({ name, arguments: {} })).rejects.toThrow(/Unknown tool/);
    }
    expect(h.elicitations).toHaveLength(0);
  });

  it('path traversal in every file tool argument is refused and nothing outside is touched', async () => {
    const { root } = await project();
    await writeFile(path.join(root, 'ok.txt'), 'ok\n');
    const h = await connect({ cwd: root, args: ['--mode', 'bypass'] });
    const calls: Array<[string, Record<string, unknown>]> = [
      ['read_file', { path: '../../../etc/passwd' }],
      ['glob', { pattern: '*', path: '..' }],
      ['glob', { pattern: '../*' }],
      ['grep', { pattern: 'root', path: '/etc' }],
      ['diff', { path: '/etc/passwd', content: '' }],
      ['diff', { path: 'ok.txt', otherPath: '../../../etc/hostname' }],
      ['write_file', { path: '../escaped.txt', content: 'x' }],
      ['write_file', { path: 'capsule.json', content: '{}' }],
      ['edit_file', { path: '/etc/hostname', oldText: 'a', newText: 'b' }],
      ['run_command', { command: 'true', cwd: '../' }],
    ];
    for (const [name, args] of calls) {
      const r = await h.client.callTool({ name, arguments: args });
      expect(`${name} ${JSON.stringify(args)}: ${r.isError === true} ${textOf(r).split(':')[0]}`).toBe(
        `${name} ${JSON.stringify(args)}: true PATH_ESCAPE`,
      );
    }
    expect(existsSync(path.join(path.dirname(root), 'escaped.txt'))).toBe(false);
    expect(await readFile(path.join(root, 'capsule.json'), 'utf8')).toBe('{ "schemaVersion": 1 }\n');
  });

  it('generate_* cannot write capsule.json or outside the capability root', async () => {
    const { root, capRoot } = await project();
    const h = await connect({
      cwd: root,
      args: ['--grant', 'generate_capability:shell', '--grant', 'generate_capability:docker'],
    });
    const attempts: Array<[string, Record<string, unknown>]> = [
      [
        'generate_shell_capability',
        { files: { 'capsule.json': '{"allowlist":{"run_command:*":"AlwaysThisProject"}}' } },
      ],
      ['generate_shell_capability', { files: { '../../capsule.json': '{}' } }],
      ['generate_shell_capability', { files: { 'capability.json': '{}' } }],
      ['generate_shell_capability', { name: '../../evil' }],
      ['generate_shell_capability', { root: '.' }],
      ['generate_docker_capability', { files: { 'nested/capsule.json': '{}' } }],
    ];
    for (const [name, extra] of attempts) {
      const r = await h.client.callTool({
        name,
        arguments: { name: 'x', description: 'd', script: 'true\n', ...extra },
      });
      expect(`${name} ${JSON.stringify(extra)}: ${r.isError === true}`).toBe(
        `${name} ${JSON.stringify(extra)}: true`,
      );
      expect(textOf(r)).toMatch(/^(PATH_ESCAPE|USAGE): /);
    }
    expect(await readFile(path.join(root, 'capsule.json'), 'utf8')).toBe('{ "schemaVersion": 1 }\n');
    expect(await readdir(capRoot)).toEqual([]);
    // The registry sees a valid generated capability without a restart.
    const ok = await h.client.callTool({
      name: 'generate_shell_capability',
      arguments: { name: 'fine', description: 'd', script: 'echo fine\n' },
    });
    expect(ok.isError, textOf(ok)).toBeFalsy();
    const list = await h.client.callTool({ name: 'list_capabilities', arguments: {} });
    expect(
      (list.structuredContent as { capabilities: Array<{ name: string }> }).capabilities.map((c) => c.name),
    ).toEqual(['fine']);
  });

  it('reload picks up a hand-edited project allowlist once the person confirms it', async () => {
    const { root, capRoot } = await project();
    await writeCapability(capRoot, 'hello', {}, { 'run.sh': 'echo hello\n' });
    const h = await connect({
      cwd: root,
      env: { CAPSULE_STATE_DIR: await mkdtemp(path.join(tmpdir(), 'capsule-mcp-state-')) },
      answer: (p) =>
        p.message.includes('differs from the one confirmed')
          ? { action: 'accept', content: { decision: 'adopt' } }
          : choose('Deny'),
    });
    expect((await h.client.callTool({ name: 'run_capability', arguments: { name: 'hello' } })).isError).toBe(
      true,
    );
    // A shell capability in the project allowlist breaks the ceiling rule: after reload it is a clear error.
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, allowlist: { 'run_capability:hello': 'AlwaysThisProject' } }),
    );
    const reload = await h.client.callTool({ name: 'reload', arguments: {} });
    expect(reload.structuredContent).toMatchObject({
      capabilities: 1,
      allowlistEntries: 1,
      policy: { changed: true, applied: true },
    });
    const r = await h.client.callTool({ name: 'run_capability', arguments: { name: 'hello' } });
    expect(textOf(r)).toMatch(/^CEILING_VIOLATION: /);
  });
});

/** CPU time (user + system, in clock ticks) a process has used, from /proc. */
async function cpuTicks(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

describe('capsule mcp: canceling a wasm run', () => {
  it('terminates the spinning worker (the server stops burning CPU) and keeps serving', async () => {
    const { root } = await project();
    const h = await connect({
      cwd: root,
      args: ['--grant', 'generate_capability:wasm', '--grant', 'run_capability:spin'],
    });
    const gen = await h.client.callTool(
      {
        name: 'generate_wasm_capability',
        arguments: {
          name: 'spin',
          description: 'never returns',
          source: 'export function run(input) { for (;;) {} }',
          limits: { timeoutMs: 120_000 },
        },
      },
      undefined,
      { timeout: 120_000 },
    );
    expect(gen.isError, textOf(gen)).toBeFalsy();
    const pid = h.pid as number;
    const ac = new AbortController();
    const pending = h.client.callTool({ name: 'run_capability', arguments: { name: 'spin' } }, undefined, {
      signal: ac.signal,
      timeout: 120_000,
    });
    // Judged below; if the test fails first, the close in afterEach must not leave the rejection unhandled.
    void pending.catch(() => undefined);
    // CPU ticks the server uses in one second (100 ticks: one core busy all of it).
    const rate = async (): Promise<number> => {
      const before = await cpuTicks(pid);
      await delay(1000);
      return (await cpuTicks(pid)) - before;
    };
    // The first run transpiles the component, then spins: wait for the server to be busy, however long that takes.
    await eventually(async () => (await rate()) > 20, 'the server to be spinning the guest', {
      timeoutMs: 90_000,
    });
    ac.abort();
    await expect(pending).rejects.toThrow();
    // The cancel stops the guest: the server goes idle (it stays up and answers).
    await eventually(async () => (await rate()) < 8, 'the server to go idle after the cancel');
    expect((await h.client.listTools()).tools.length).toBeGreaterThan(0);
  });
});
