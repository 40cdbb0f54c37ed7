import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, readdir, readlink, writeFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_CLI } from '../../../helpers/cli.js';
import { choose, connectCapsule, type McpHarness } from '../../mcp/mcp-client.js';
import { assemble, wasmCapability } from './helpers.js';
import { eventually } from '../../../helpers/eventually.js';

// A wasm capability runs in a worker thread of capsule's own process: when capsule is SIGKILLed mid-call,
// nothing of the call may be left running. Drives the built CLI and MCP server (npm run build first).

/** CPU time (user + system, in clock ticks) a process has used, or undefined once it is gone. */
async function cpuTicks(pid: number): Promise<number | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return undefined;
  }
}

/** Processes (other than this test's) whose working directory is inside `root`. */
async function processesIn(root: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    const cwd = await readlink(`/proc/${pid}/cwd`).catch(() => '');
    if (cwd === root || cwd.startsWith(`${root}/`)) found.push(pid);
  }
  return found;
}

describe('a spinning wasm capability when capsule is SIGKILLed', () => {
  let spin: Uint8Array;
  const children: ChildProcess[] = [];
  const harnesses: McpHarness[] = [];

  beforeAll(() => {
    if (!existsSync(BUILT_CLI)) throw new Error(`${BUILT_CLI} is missing: run "npm run build" first`);
    spin = assemble('start-loop.wat');
  });

  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    for (const h of harnesses) await h.close().catch(() => {});
  });

  /** Waits until `pid` has burnt a second of CPU (the module spins), SIGKILLs it, and checks what is left. */
  async function killWhileSpinning(pid: number, root: string): Promise<void> {
    await eventually(async () => ((await cpuTicks(pid)) ?? 0) > 100, 'the guest to be spinning', {
      timeoutMs: 60_000,
    });
    expect(await processesIn(root)).toContain(pid);
    process.kill(pid, 'SIGKILL');
    await eventually(async () => (await cpuTicks(pid)) === undefined, 'the worker process to be gone');
    // Nothing started by the call (no child, no helper) is left in the project either.
    expect(await processesIn(root)).toEqual([]);
  }

  it('capsule run: the process and its worker are gone', async () => {
    const { root } = await wasmCapability('spin', spin, { manifest: { limits: { timeoutMs: 120_000 } } });
    const child = spawn(process.execPath, [BUILT_CLI, 'run', 'spin', '--grant', 'run_capability:spin'], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    if (child.pid === undefined) throw new Error('no pid');
    await killWhileSpinning(child.pid, root);
  });

  it('capsule mcp: the server and its worker are gone', async () => {
    const { root } = await wasmCapability('spin', spin, { manifest: { limits: { timeoutMs: 120_000 } } });
    await writeFile(`${root}/capsule.json`, '{ "schemaVersion": 1 }\n');
    const h = await connectCapsule({ cwd: root, answer: () => choose('Once') });
    harnesses.push(h);
    void h.client
      .callTool({ name: 'run_capability', arguments: { name: 'spin' } }, undefined, { timeout: 120_000 })
      .catch(() => {});
    if (h.pid === null) throw new Error('no server pid');
    await killWhileSpinning(h.pid, root);
  });
});
