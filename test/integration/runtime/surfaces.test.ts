import { existsSync } from 'node:fs';
import { mkdtemp, readFile, realpath, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openAgentSession } from '../../../src/agent/open-session.js';
import type { AgentSession } from '../../../src/agent/agent-session.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI, builtCli, cli } from '../../helpers/cli.js';
import { connectCapsule, textOf, type McpHarness } from '../mcp/mcp-client.js';
import { assemble } from '../runners/wasm/helpers.js';

// Every surface (CLI, MCP, library) gets the same project root, the same grant keys and the same
// protected set: a difference between them is a way around the one that is stricter.

const CONFIG = '{ "schemaVersion": 1 }\n';
const sessions: AgentSession[] = [];
const harnesses: McpHarness[] = [];
afterEach(async () => {
  for (const s of sessions.splice(0)) await s.close();
  for (const h of harnesses.splice(0)) await h.close();
});

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before these tests');
});

/** A project whose only capability is the probe, granted rw on the project root itself. */
async function probeProject(): Promise<{ root: string; link: string }> {
  const { root, capRoot } = await tempProject('capsule-surface-');
  await writeFile(path.join(root, 'capsule.json'), CONFIG);
  await writeCapability(
    capRoot,
    'probe',
    {
      description: 'writes capsule.json through a grant on the project root',
      environment: 'wasm',
      entry: 'probe.wasm',
      interpreter: undefined,
      args: ['write', 'capsule.json'],
      grants: { fs: [{ path: '.', mode: 'rw' }] },
    },
    { 'probe.wasm': assemble('probe.wat') },
  );
  const link = path.join(await realpath(await mkdtemp(path.join(tmpdir(), 'capsule-link-'))), 'project');
  await symlink(root, link);
  return { root, link };
}

describe('the library session (openAgentSession) realpaths its project root', () => {
  it('a wasm grant on "." cannot rewrite capsule.json when cwd is a symlink to the project', async () => {
    const { root, link } = await probeProject();
    const session = await openAgentSession({
      cwd: link,
      grants: ['run_capability:probe'],
      runners: [new WasmRunner({})],
    });
    sessions.push(session);
    await session.call('run_capability', { name: 'probe', input: {} }).catch(() => undefined);
    expect(await readFile(path.join(root, 'capsule.json'), 'utf8')).toBe(CONFIG);
  });

  it('and so does the CLI (capsule run from the symlinked directory)', async () => {
    const { root, link } = await probeProject();
    await cli(['run', 'probe', '--grant', 'run_capability:probe'], { cwd: link });
    expect(await readFile(path.join(root, 'capsule.json'), 'utf8')).toBe(CONFIG);
  });

  it('the same holds from the real root (the control case)', async () => {
    const { root } = await probeProject();
    const session = await openAgentSession({
      cwd: root,
      grants: ['run_capability:probe'],
      runners: [new WasmRunner({})],
    });
    sessions.push(session);
    await session.call('run_capability', { name: 'probe', input: {} }).catch(() => undefined);
    expect(await readFile(path.join(root, 'capsule.json'), 'utf8')).toBe(CONFIG);
  });
});

describe('--grant keys mean the same in capsule mcp as in the CLI', () => {
  it('a compound grant written with extra spaces covers the same command in exec and in mcp', async () => {
    const { root } = await tempProject('capsule-surface-');
    await writeFile(path.join(root, 'capsule.json'), CONFIG);
    const grant = (marker: string): string => `run_command:true   &&    touch ${marker}`;

    const exec = await builtCli(
      ['exec', '--no-prompt', '--grant', grant('m-cli'), '--', 'true && touch m-cli'],
      {
        cwd: root,
      },
    );
    expect(exec.code, exec.stderr).toBe(0);
    expect(existsSync(path.join(root, 'm-cli'))).toBe(true);

    const h = await connectCapsule({ cwd: root, args: ['--no-prompt', '--grant', grant('m-mcp')] });
    harnesses.push(h);
    const r = await h.client.callTool({
      name: 'run_command',
      arguments: { command: 'true && touch m-mcp' },
    });
    expect(existsSync(path.join(root, 'm-mcp')), textOf(r)).toBe(true);
  });

  it('a key the CLI refuses (a simple command with arguments) is refused by mcp too', async () => {
    const { root } = await tempProject('capsule-surface-');
    await writeFile(path.join(root, 'capsule.json'), CONFIG);
    const exec = await builtCli(['exec', '--no-prompt', '--grant', 'run_command:touch m', '--', 'true'], {
      cwd: root,
    });
    expect(exec.code).toBe(64);
    const session = openAgentSession({ cwd: root, grants: ['run_command:touch m'] });
    await expect(session).rejects.toMatchObject({ code: 'USAGE' });
    const mcp = await builtCli(['mcp', '--grant', 'run_command:touch m'], { cwd: root });
    expect(mcp.code).toBe(64);
  });
});
