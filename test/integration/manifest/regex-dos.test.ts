import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';
import { choose, connectCapsule, textOf } from '../mcp/mcp-client.js';

/**
 * A hostile schema pattern must not hang capsule: Ajv matches `pattern` with V8's backtracking
 * engine in capsule's own process, and `^(a+)+$` against 40 a's and a "!" takes longer than anyone
 * waits. Judged through the built binary by the command finishing (vitest's test timeout is the only
 * clock) and the manifest reported invalid, naming the field.
 */
const EVIL = '^(a+)+$';
const HOSTILE_INPUT = JSON.stringify({ s: `${'a'.repeat(40)}!` });

async function hostile(schemaFor: (pattern: string) => Record<string, unknown>, key = 'inputSchema') {
  const { root, capRoot } = await tempProject('capsule-redos-');
  await writeCapability(capRoot, 'evil', { [key]: schemaFor(EVIL) }, { 'run.sh': 'echo "{}"\n' });
  return root;
}

const run = (root: string, args: string[]) =>
  execa('node', [BUILT_CLI, ...args], { cwd: root, reject: false, stdin: 'ignore' });

describe('a hostile pattern in a schema cannot hang capsule', () => {
  it('capsule run: the manifest is invalid (65) and the input is never matched', async () => {
    const root = await hostile((pattern) => ({
      type: 'object',
      properties: { s: { type: 'string', pattern } },
    }));
    const r = await run(root, [
      'run',
      'evil',
      '--grant',
      'run_capability:evil',
      '--no-prompt',
      '--input',
      HOSTILE_INPUT,
    ]);
    expect(r.exitCode).toBe(65);
    expect(r.stderr).toMatch(/inputSchema/);
  });

  it('capsule validate names the field and the pattern', async () => {
    const root = await hostile((pattern) => ({
      type: 'object',
      properties: { s: { type: 'string', pattern } },
    }));
    const r = await run(root, ['validate', '--json']);
    expect(r.exitCode).toBe(1);
    const out = JSON.parse(r.stdout) as { invalid: { issues: { field?: string; message: string }[] }[] };
    const issue = out.invalid[0]?.issues.find((i) => i.field === 'inputSchema');
    expect(issue?.message).toContain('inputSchema.properties.s.pattern');
  });

  it('an outputSchema pattern is refused the same way: the run never validates its output', async () => {
    const root = await hostile(
      (pattern) => ({ type: 'object', properties: { s: { type: 'string', pattern } } }),
      'outputSchema',
    );
    const r = await run(root, ['run', 'evil', '--grant', 'run_capability:evil', '--no-prompt']);
    expect(r.exitCode).toBe(65);
    expect(r.stderr).toMatch(/outputSchema/);
  });

  it('format: "regex" does not compile or match the input as a regular expression', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    await writeCapability(
      capRoot,
      'fmt',
      { inputSchema: { type: 'object', properties: { s: { type: 'string', format: 'regex' } } } },
      { 'run.sh': 'echo ok\n' },
    );
    const r = await run(root, [
      'run',
      'fmt',
      '--grant',
      'run_capability:fmt',
      '--no-prompt',
      '--input',
      JSON.stringify({ s: EVIL }),
    ]);
    expect(r.exitCode).toBe(0);
  });

  it('an agent cannot install one: generate_shell_capability with a hostile pattern writes nothing', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const h = await connectCapsule({ cwd: root, answer: () => choose('Once') });
    try {
      for (const [name, inputSchema] of [
        ['nested', { type: 'object', properties: { s: { type: 'string', pattern: '^(a{1,}){1,}$' } } }],
        ['keyed', { type: 'object', patternProperties: { '^(a|a)*$': { type: 'string' } } }],
        ['named', { type: 'object', propertyNames: { pattern: '^(\\w+\\s?)*$' } }],
        [
          'defs',
          { type: 'object', $defs: { s: { pattern: EVIL } }, properties: { s: { $ref: '#/$defs/s' } } },
        ],
      ] as const) {
        const r = await h.client.callTool({
          name: 'generate_shell_capability',
          arguments: { name, description: 'hostile', script: 'echo {}\n', inputSchema },
        });
        expect(r.isError, `${name}: ${textOf(r)}`).toBe(true);
        expect(existsSync(path.join(capRoot, name)), name).toBe(false);
      }
      // The same call with a safe pattern installs: the refusals above are the patterns'.
      const ok = await h.client.callTool({
        name: 'generate_shell_capability',
        arguments: {
          name: 'benign',
          description: 'safe',
          script: 'echo {}\n',
          inputSchema: { type: 'object', properties: { s: { type: 'string', pattern: '^[a-z]+$' } } },
        },
      });
      expect(ok.isError, textOf(ok)).toBeFalsy();
      expect(existsSync(path.join(capRoot, 'benign'))).toBe(true);
    } finally {
      await h.close();
    }
  });
});
