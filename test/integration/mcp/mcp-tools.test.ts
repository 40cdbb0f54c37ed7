import { existsSync } from 'node:fs';
import { cp, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ToolListChangedNotificationSchema, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TOOL_NAMES } from '../../../src/tools/catalog.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI, cli, REPO_ROOT } from '../../helpers/cli.js';
import { choose, connectCapsule, textOf, type McpHarness } from './mcp-client.js';

// End to end with the real MCP SDK client over stdio against the built `capsule mcp`: what a client
// sees in tools/list (annotations, capability tools, output schemas), structured results, list_changed.

const harnesses: McpHarness[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

async function connect(...args: Parameters<typeof connectCapsule>): Promise<McpHarness> {
  const h = await connectCapsule(...args);
  harnesses.push(h);
  return h;
}

async function project(): Promise<{ root: string; capRoot: string }> {
  const p = await tempProject('capsule-mcp-tools-');
  await writeFile(path.join(p.root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  return p;
}

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the MCP integration tests');
});

const COUNT_SCHEMA = {
  type: 'object',
  properties: { count: { type: 'integer' }, word: { type: 'string' } },
  required: ['count'],
};

describe('capsule mcp: tools as clients expect them', () => {
  it('every tool carries all four hints and a title; each kind is annotated as what it does', async () => {
    const { root, capRoot } = await project();
    await writeCapability(capRoot, 'hosty', {}, { 'run.sh': 'echo hi\n' });
    await cp(path.join(REPO_ROOT, 'capabilities', 'shout-wasm'), path.join(capRoot, 'shout-wasm'), {
      recursive: true,
    });
    const docker = { environment: 'docker', docker: { image: 'capsule/busybox:1' } };
    await writeCapability(capRoot, 'boxed', docker, { 'run.sh': 'echo boxed\n' });
    await writeCapability(
      capRoot,
      'caller',
      { ...docker, grants: { network: [{ host: 'api.example.test' }] } },
      { 'run.sh': 'echo calls\n' },
    );
    const h = await connect({ cwd: root });
    const tools = (await h.client.listTools()).tools;
    const byName = new Map(tools.map((t) => [t.name, t]));
    for (const t of tools) {
      expect(typeof t.title, t.name).toBe('string');
      for (const hint of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'] as const)
        expect(typeof t.annotations?.[hint], `${t.name}.${hint}`).toBe('boolean');
    }
    const hints = (name: string) => {
      const a = (byName.get(name) as Tool | undefined)?.annotations;
      return [a?.readOnlyHint, a?.destructiveHint, a?.openWorldHint];
    };
    // Every built-in tool is served; read-only ones are read-only and closed-world.
    for (const name of TOOL_NAMES) expect(byName.has(name), name).toBe(true);
    for (const name of ['read_file', 'glob', 'grep', 'diff', 'list_capabilities', 'describe_capability'])
      expect(hints(name), name).toEqual([true, false, false]);
    expect(hints('write_file')).toEqual([false, true, false]);
    expect(hints('edit_file')).toEqual([false, true, false]);
    expect(hints('run_command')).toEqual([false, true, true]);
    expect(hints('generate_wasm_capability')).toEqual([false, true, false]);
    // Capabilities are tools too: open world only for shell and network-granted ones.
    expect(hints('cap_hosty')).toEqual([false, true, true]);
    expect(hints('cap_shout-wasm')).toEqual([true, false, false]);
    expect(hints('cap_boxed')).toEqual([true, false, false]);
    expect(hints('cap_caller')).toEqual([false, true, true]);
    expect(byName.get('cap_hosty')?.description).toContain('NOT sandboxed');
    // A profile without run_capability serves no capability tools.
    const explore = await connect({ cwd: root, args: ['--profile', 'explore'] });
    expect((await explore.client.listTools()).tools.some((t) => t.name.startsWith('cap_'))).toBe(false);
  });

  it('a capability with an outputSchema returns structuredContent the client SDK validates', async () => {
    const { root, capRoot } = await project();
    await writeCapability(
      capRoot,
      'counter',
      {
        inputSchema: { type: 'object', properties: { word: { type: 'string' } }, required: ['word'] },
        outputSchema: COUNT_SCHEMA,
      },
      { 'run.sh': `printf '{"count": 3, "word": "abc"}'\n` },
    );
    const h = await connect({ cwd: root, args: ['--grant', 'run_capability:counter'] });
    const tool = (await h.client.listTools()).tools.find((t) => t.name === 'cap_counter');
    expect(tool?.outputSchema).toMatchObject(COUNT_SCHEMA);
    expect(tool?.inputSchema).toMatchObject({ required: ['word'] });
    // The SDK client checks structuredContent against the listed outputSchema (it throws otherwise).
    const r = await h.client.callTool({ name: 'cap_counter', arguments: { word: 'abc' } });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(r.structuredContent).toEqual({ count: 3, word: 'abc' });
    // The input is still validated by capsule before anything runs.
    const bad = await h.client.callTool({ name: 'cap_counter', arguments: {} });
    expect(bad.isError).toBe(true);
    expect(textOf(bad)).toMatch(/INPUT_INVALID/);
  });

  it('a lying capability (output breaks its schema, or is not JSON) is an error without structuredContent', async () => {
    const { root, capRoot } = await project();
    await writeCapability(
      capRoot,
      'liar',
      { outputSchema: COUNT_SCHEMA },
      { 'run.sh': `printf '{"count": "three"}'\n` },
    );
    await writeCapability(
      capRoot,
      'prose',
      { outputSchema: COUNT_SCHEMA },
      { 'run.sh': `echo 'count: 3'\n` },
    );
    const h = await connect({
      cwd: root,
      args: ['--grant', 'run_capability:liar', '--grant', 'run_capability:prose'],
    });
    await h.client.listTools();
    const liar = await h.client.callTool({ name: 'cap_liar', arguments: {} });
    expect(liar.isError).toBe(true);
    expect(liar.structuredContent).toBeUndefined();
    expect(textOf(liar)).toMatch(/outputSchema[\s\S]*output\.count must be integer/);
    const prose = await h.client.callTool({ name: 'cap_prose', arguments: {} });
    expect(prose.isError).toBe(true);
    expect(prose.structuredContent).toBeUndefined();
    expect(textOf(prose)).toMatch(/not JSON/);
    // The same run through run_capability is a failed result too, never a valid one.
    const viaRun = await h.client.callTool({ name: 'run_capability', arguments: { name: 'liar' } });
    expect(viaRun.isError).toBe(true);
    expect((viaRun.structuredContent as { outputInvalid?: string }).outputInvalid).toMatch(/output\.count/);
    // And `capsule run` fails and does not print the lie.
    const run = await cli(['run', 'liar', '--grant', 'run_capability:liar', '--no-prompt'], {
      cwd: root,
      env: { ...process.env, CAPSULE_STATE_DIR: path.join(root, '.state') },
    });
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/output\.count must be integer/);
  });

  it('notifications/tools/list_changed after generate_* and after reload; the re-listed tools include the new one', async () => {
    const { root, capRoot } = await project();
    const h = await connect({ cwd: root, answer: () => choose('Once') });
    let changed = 0;
    let notify: () => void = () => undefined;
    h.client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      changed += 1;
      notify();
    });
    const next = () => new Promise<void>((resolve) => (notify = resolve));
    const names = async () => (await h.client.listTools()).tools.map((t) => t.name);
    expect(await names()).not.toContain('cap_made');

    let arrived = next();
    const gen = await h.client.callTool({
      name: 'generate_shell_capability',
      arguments: { name: 'made', description: 'made by the agent', script: 'echo made\n' },
    });
    expect(gen.isError, textOf(gen)).toBeFalsy();
    await arrived;
    expect(changed).toBe(1);
    expect(await names()).toContain('cap_made');

    // A capability written behind the server's back appears after reload.
    await writeCapability(capRoot, 'dropped', {}, { 'run.sh': 'echo dropped\n' });
    arrived = next();
    const reload = await h.client.callTool({ name: 'reload', arguments: {} });
    expect(reload.isError, textOf(reload)).toBeFalsy();
    await arrived;
    expect(changed).toBe(2);
    expect(await names()).toContain('cap_dropped');

    // A denied generate changes nothing and announces nothing.
    const denied = await connect({ cwd: root });
    let deniedChanged = 0;
    denied.client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      deniedChanged += 1;
    });
    const refused = await denied.client.callTool({
      name: 'generate_shell_capability',
      arguments: { name: 'never', description: 'x', script: 'echo x\n' },
    });
    expect(refused.isError).toBe(true);
    // A later call's response comes after any notification sent before it.
    await denied.client.callTool({ name: 'list_capabilities', arguments: {} });
    expect(deniedChanged).toBe(0);
    expect(existsSync(path.join(capRoot, 'never'))).toBe(false);
  });

  it('list_changed after any call that changed the capabilities (write_file, edit_file, run_command); not after other writes', async () => {
    const { root } = await project();
    const h = await connect({ cwd: root, answer: () => choose('Once') });
    let changed = 0;
    h.client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      changed += 1;
    });
    const names = async () => (await h.client.listTools()).tools.map((t) => t.name);
    const call = async (name: string, args: Record<string, unknown>) => {
      const r = await h.client.callTool({ name, arguments: args });
      expect(r.isError, textOf(r)).toBeFalsy();
      // The notification is sent before the call's response: the count is settled here.
      return changed;
    };
    const manifest = JSON.stringify({
      schemaVersion: 1,
      name: 'written',
      description: 'written by write_file',
      environment: 'shell',
      entry: 'run.sh',
      interpreter: 'sh',
    });
    // A write elsewhere in the project changes no tool.
    expect(await call('write_file', { path: 'notes.txt', content: 'hello\n' })).toBe(0);
    // A manifest whose entry is missing is not a valid capability yet: no tool appears.
    expect(
      await call('write_file', { path: 'capabilities/written/capability.json', content: manifest }),
    ).toBe(0);
    expect(await names()).not.toContain('cap_written');
    // Its entry makes it valid: a new tool, announced.
    expect(await call('write_file', { path: 'capabilities/written/run.sh', content: 'echo one\n' })).toBe(1);
    expect(await names()).toContain('cap_written');
    // Changing its code changes its content hash: announced again.
    expect(
      await call('edit_file', { path: 'capabilities/written/run.sh', oldText: 'one', newText: 'two' }),
    ).toBe(2);
    // A command that writes elsewhere announces nothing; one that removes the capability does.
    expect(await call('run_command', { command: 'touch other.txt' })).toBe(2);
    expect(await call('run_command', { command: 'rm -r capabilities/written' })).toBe(3);
    expect(await names()).not.toContain('cap_written');
  });

  it('a denial over MCP says what stopped it and what a person must do, never "run again"', async () => {
    const { root, capRoot } = await project();
    await writeFile(
      path.join(root, 'capsule.json'),
      JSON.stringify({ schemaVersion: 1, permissions: { deny: ['run_capability(blocked)'] } }),
    );
    await writeCapability(capRoot, 'blocked', {}, { 'run.sh': `touch ${root}/blocked-ran\n` });
    await writeCapability(capRoot, 'asked', {}, { 'run.sh': `touch ${root}/asked-ran\n` });
    const h = await connect({ cwd: root, answer: () => choose('Deny') });
    const rule = await h.client.callTool({ name: 'cap_blocked', arguments: {} });
    expect(textOf(rule)).toMatch(/^PERMISSION_DENIED: denied by a rule\./);
    expect(textOf(rule)).toContain('run_capability(blocked)');
    const person = await h.client.callTool({ name: 'cap_asked', arguments: {} });
    expect(textOf(person)).toMatch(/^PERMISSION_DENIED: denied by a person\./);
    const nobody = await connect({ cwd: root });
    const none = await nobody.client.callTool({ name: 'cap_asked', arguments: {} });
    expect(textOf(none)).toMatch(/^PERMISSION_DENIED: denied by nobody/);
    expect(textOf(none)).toContain("capsule mcp --grant 'run_capability:asked'");
    for (const r of [rule, person, none]) {
      expect(r.isError).toBe(true);
      expect(textOf(r)).not.toMatch(/run again/);
    }
    expect(existsSync(path.join(root, 'blocked-ran'))).toBe(false);
    expect(existsSync(path.join(root, 'asked-ran'))).toBe(false);
  });

  it('a capability tool is run_capability underneath: hidden where run_capability is, gone when the capability is', async () => {
    const { root, capRoot } = await project();
    await writeCapability(capRoot, 'touchy', {}, { 'run.sh': `touch "${root}/touchy-ran"\n` });
    // explore has no run_capability: a cap_ name is an unknown tool (protocol error), and nothing runs.
    const explore = await connect({
      cwd: root,
      args: ['--profile', 'explore', '--grant', 'run_capability:touchy'],
    });
    await expect(explore.client.callTool({ name: 'cap_touchy', arguments: {} })).rejects.toThrow(
      /-32602|Unknown tool/,
    );
    expect(existsSync(path.join(root, 'touchy-ran'))).toBe(false);
    // A listed capability removed before the call: a clear NOT_FOUND, nothing runs.
    const h = await connect({ cwd: root, args: ['--grant', 'run_capability:touchy'] });
    expect((await h.client.listTools()).tools.some((t) => t.name === 'cap_touchy')).toBe(true);
    await rm(path.join(capRoot, 'touchy'), { recursive: true });
    const gone = await h.client.callTool({ name: 'cap_touchy', arguments: {} });
    expect(gone.isError).toBe(true);
    expect(textOf(gone)).toMatch(/^NOT_FOUND: No capability named "touchy"/);
    expect(existsSync(path.join(root, 'touchy-ran'))).toBe(false);
    // The capability tool asks about the same key as run_capability, and a "no" runs nothing.
    await writeCapability(capRoot, 'touchy', {}, { 'run.sh': `touch "${root}/touchy-ran"\n` });
    const asked = await connect({ cwd: root, answer: () => choose('Deny') });
    await asked.client.callTool({ name: 'cap_touchy', arguments: {} });
    expect(asked.elicitations.map((e) => /permission needed: (.*)/.exec(e.message)?.[1])).toEqual([
      'run_capability:touchy',
    ]);
    expect(existsSync(path.join(root, 'touchy-ran'))).toBe(false);
  });

  it('generate_* takes an outputSchema: the new tool serves it; one that is not an object schema writes nothing', async () => {
    const { root, capRoot } = await project();
    const h = await connect({
      cwd: root,
      answer: () => choose('AlwaysThisSession'),
    });
    const gen = await h.client.callTool({
      name: 'generate_shell_capability',
      arguments: {
        name: 'typed',
        description: 'counts',
        script: `printf '{"count": 7}'\n`,
        outputSchema: COUNT_SCHEMA,
      },
    });
    expect(gen.isError, textOf(gen)).toBeFalsy();
    const tool = (await h.client.listTools()).tools.find((t) => t.name === 'cap_typed');
    expect(tool?.outputSchema).toMatchObject(COUNT_SCHEMA);
    const r = await h.client.callTool({ name: 'cap_typed', arguments: {} });
    expect(r.structuredContent).toEqual({ count: 7 });
    const bad = await h.client.callTool({
      name: 'generate_shell_capability',
      arguments: { name: 'untyped', description: 'x', script: 'echo 1\n', outputSchema: { type: 'string' } },
    });
    expect(bad.isError).toBe(true);
    expect(textOf(bad)).toMatch(/outputSchema/);
    expect(existsSync(path.join(capRoot, 'untyped'))).toBe(false);
  });
});
