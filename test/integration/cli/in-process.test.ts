import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { runCli } from '../../../src/cli/program.js';
import { VERSION } from '../../../src/cli/version.js';
import { tempProject } from '../../helpers/capability.js';

/** An in-process CLI whose stdin, stdout and signals the test holds (as the MCP SDK's stdio transport does). */
function harness(cwd: string) {
  const stdin = new PassThrough();
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const signals = new EventEmitter();
  const lines: unknown[] = [];
  let buffered = '';
  const waiting: Array<() => void> = [];
  stdout.on('data', (c: Buffer) => {
    buffered += c.toString();
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      lines.push(JSON.parse(buffered.slice(0, nl)));
      buffered = buffered.slice(nl + 1);
      for (const w of waiting.splice(0)) w();
    }
  });
  const nextLine = async (): Promise<unknown> => {
    while (lines.length === 0) await new Promise<void>((r) => waiting.push(r));
    return lines.shift();
  };
  const io = {
    stdin: () => stdin,
    signals,
    stdout,
    stderr,
    cwd,
    env: { PATH: process.env.PATH, XDG_STATE_HOME: process.env.XDG_STATE_HOME },
    interactive: false,
    exitCode: 0,
  };
  return { io, stdin, signals, nextLine };
}

const initialize = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
};

describe('the CLI in-process with injected stdin and signals', () => {
  it('capsule mcp serves on the injected stdin and ends when it ends', async () => {
    const { root } = await tempProject();
    const h = harness(root);
    const done = runCli(['mcp', '--no-prompt'], h.io);
    h.stdin.write(`${JSON.stringify(initialize)}\n`);
    expect(await h.nextLine()).toMatchObject({ id: 1, result: { serverInfo: { version: VERSION } } });
    h.stdin.end();
    expect(await done).toBe(0);
  });

  it('capsule mcp stops on the injected SIGTERM, not the process’s', async () => {
    const { root } = await tempProject();
    const h = harness(root);
    const done = runCli(['mcp', '--no-prompt'], h.io);
    h.stdin.write(`${JSON.stringify(initialize)}\n`);
    await h.nextLine();
    expect(h.signals.listenerCount('SIGTERM')).toBe(1);
    h.signals.emit('SIGTERM');
    expect(await done).toBe(0);
    expect(h.signals.listenerCount('SIGTERM') + h.signals.listenerCount('SIGINT')).toBe(0);
  });
});
