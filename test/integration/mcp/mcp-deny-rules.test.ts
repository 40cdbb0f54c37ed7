import { existsSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ElicitRequest } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { tempProject } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';
import { choose, connectCapsule, textOf, type McpHarness } from './mcp-client.js';

// An agent over the real `capsule mcp` runs `setpriv rm v` beside deny run_command(rm *), with setpriv
// granted: only a person may let it run, once, and the question says which rule and why.

const harnesses: McpHarness[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the MCP integration tests');
});

async function project(): Promise<{ root: string; env: Record<string, string> }> {
  const { root } = await tempProject('capsule-mcp-deny-');
  await writeFile(
    path.join(root, 'capsule.json'),
    JSON.stringify({ schemaVersion: 1, permissions: { deny: ['run_command(rm *)'] } }),
  );
  await writeFile(path.join(root, 'v'), 'victim');
  return { root, env: { CAPSULE_STATE_DIR: await mkdtemp(path.join(tmpdir(), 'capsule-mcp-state-')) } };
}

const run = (h: McpHarness, command: string) =>
  h.client.callTool({ name: 'run_command', arguments: { command } });

const optionsOf = (p: ElicitRequest['params']): string[] => {
  const schema = (p as { requestedSchema?: unknown }).requestedSchema as {
    properties: { decision: { oneOf: Array<{ const: string }> } };
  };
  return schema.properties.decision.oneOf.map((o) => o.const);
};

describe('capsule mcp: a command not proven clear of a deny rule', () => {
  it('is asked past the grant, naming the rule, and offered once only', async () => {
    const { root, env } = await project();
    const answers = [choose('Once'), choose('AlwaysThisSession')];
    const h = await connectCapsule({
      cwd: root,
      env,
      args: ['--grant', 'run_command:setpriv'],
      answer: () => answers.shift() ?? choose('Deny'),
    });
    harnesses.push(h);
    await writeFile(path.join(root, 'w'), 'x');
    await run(h, 'setpriv rm w');
    expect(h.elicitations).toHaveLength(1);
    const asked = h.elicitations[0] as ElicitRequest['params'];
    expect(asked.message).toContain('run_command(rm *) (capsule.json)');
    expect(asked.message).toMatch(/setpriv is not known to keep its arguments from running/);
    expect(optionsOf(asked)).not.toContain('AlwaysThisSession');
    expect(optionsOf(asked)).toContain('Once');
    // The person's yes ran it, once…
    expect(existsSync(path.join(root, 'w'))).toBe(false);
    // …the next one is asked again, and an answer that was not offered is a no.
    await run(h, 'setpriv rm v');
    expect(h.elicitations).toHaveLength(2);
    expect(existsSync(path.join(root, 'v'))).toBe(true);
    // A command proven clear runs under the grant without a question.
    await run(h, 'setpriv ls');
    expect(h.elicitations).toHaveLength(2);
  });

  it('with --no-prompt it is denied by the rule, and v survives', async () => {
    const { root, env } = await project();
    const h = await connectCapsule({
      cwd: root,
      env,
      args: ['--grant', 'run_command:setpriv', '--no-prompt'],
    });
    harnesses.push(h);
    const r = await run(h, 'setpriv rm v');
    expect(textOf(r)).toMatch(/PERMISSION_DENIED: denied by a rule[\s\S]*run_command\(rm \*\)/);
    expect(existsSync(path.join(root, 'v'))).toBe(true);
  });
});
