import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../helpers/cli.js';
import { connectCapsule, textOf } from './mcp-client.js';

// A newcomer's first minutes over MCP with the SDK's own client: each message short and saying what to do.

const MAX_LINE = 320;

function short(text: string): void {
  const lines = text.split('\n');
  expect(lines.length, text).toBeLessThanOrEqual(2);
  for (const line of lines) expect(line.length, line).toBeLessThanOrEqual(MAX_LINE);
}

describe('an MCP client, first minutes', () => {
  it('tool list: every description is one short sentence or two', async () => {
    const h = await connectCapsule({ cwd: REPO_ROOT });
    try {
      const { tools } = await h.client.listTools();
      expect(tools.length).toBeGreaterThan(10);
      for (const tool of tools) short(tool.description ?? '');
    } finally {
      await h.close();
    }
  });

  it('the first elicitation names the key and the isolation; a cancel is not read as a final no', async () => {
    const h = await connectCapsule({ cwd: REPO_ROOT, answer: () => ({ action: 'cancel' }) });
    try {
      const r = await h.client.callTool({
        name: 'run_capability',
        arguments: { name: 'hello', input: { name: 'x' } },
      });
      expect(r.isError).toBe(true);
      const [asked] = h.elicitations;
      expect(asked?.message).toMatch(/^capsule: permission needed: run_capability:hello\nSandboxed/);
      short(asked?.message ?? '');
      const text = textOf(r);
      short(text);
      expect(text).toMatch(/^PERMISSION_DENIED: denied by a person/);
      expect(text).toMatch(/declined or dismissed/);
      expect(text).not.toMatch(/will not help/);
    } finally {
      await h.close();
    }
  });

  it('a client without elicitation: the denial says in two lines what a person does', async () => {
    const h = await connectCapsule({ cwd: REPO_ROOT });
    try {
      const r = await h.client.callTool({ name: 'run_command', arguments: { command: 'ls' } });
      const text = textOf(r);
      short(text);
      expect(text).toContain("capsule mcp --grant 'run_command:ls'");
    } finally {
      await h.close();
    }
  });
});
