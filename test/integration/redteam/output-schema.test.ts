import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { builtCli } from '../../helpers/cli.js';

// Attacks on outputSchema (and inputSchema) through the built CLI: a capability whose output is one
// valid document and then more, output nested deep enough to exhaust a recursive validator or the
// JSON writer, and schemas whose `$ref`s loop. Judged by effect: capsule itself never crashes (exit 70,
// "internal error"), and output that was not checked is never passed on as valid.

const INTERNAL = 70;

async function project(
  caps: Array<{ name: string; script: string; outputSchema?: unknown; inputSchema?: unknown }>,
): Promise<string> {
  const { root, capRoot } = await tempProject('capsule-redteam-output-');
  await writeFile(path.join(root, 'capsule.json'), '{}\n');
  for (const c of caps) {
    await writeCapability(
      capRoot,
      c.name,
      {
        description: 'red team',
        inputSchema: c.inputSchema ?? { type: 'object' },
        ...(c.outputSchema !== undefined ? { outputSchema: c.outputSchema } : {}),
      },
      { 'run.sh': c.script },
    );
  }
  return root;
}

const run = (root: string, name: string, json: boolean): ReturnType<typeof builtCli> =>
  builtCli(['run', name, '--grant', `run_capability:${name}`, ...(json ? ['--json'] : [])], {
    cwd: root,
  });

/** `depth` nested arrays inside an object: 2 bytes a level, so deep nesting fits the output cap. */
const deepArrays = (depth: number): string =>
  `python3 -c "import sys; sys.stdout.write('{\\"a\\":' + '['*${depth} + ']'*${depth} + '}')"\n`;

describe('red team: outputSchema', () => {
  it('a valid document followed by more is not valid output, and neither document is passed on', async () => {
    const root = await project([
      {
        name: 'more',
        script: `printf '{"ok":true}\\n{"ok":false,"injected":1}\\n'\n`,
        outputSchema: { type: 'object', properties: { ok: { type: 'boolean' } } },
      },
    ]);
    const r = await run(root, 'more', false);
    expect(r.code).not.toBe(0);
    expect(r.code).not.toBe(INTERNAL);
    expect(r.stdout).not.toContain('injected');
  });

  it('schemas whose $ref loops never crash capsule; the run fails and passes nothing on', async () => {
    const root = await project([
      { name: 'self', script: `echo '{"MARK":1}'\n`, outputSchema: { type: 'object', $ref: '#' } },
      {
        name: 'pair',
        script: `echo '{"MARK":1}'\n`,
        outputSchema: {
          type: 'object',
          definitions: { a: { $ref: '#/definitions/b' }, b: { $ref: '#/definitions/a' } },
          $ref: '#/definitions/a',
        },
      },
      { name: 'input-self', script: `echo '{"MARK":1}'\n`, inputSchema: { type: 'object', $ref: '#' } },
    ]);
    for (const name of ['self', 'pair', 'input-self']) {
      for (const json of [false, true]) {
        const r = await run(root, name, json);
        expect(r.code, `${name} ${json}: ${r.stderr}`).not.toBe(INTERNAL);
        expect(r.code, name).not.toBe(0);
        expect(r.stderr, name).not.toMatch(/internal error/);
        if (!json) expect(r.stdout, name).not.toContain('MARK');
      }
    }
  });

  it('output nested 250,000 deep: no crash with a recursive schema, nor when --json writes the result', async () => {
    const root = await project([
      {
        name: 'deep-ref',
        script: deepArrays(250_000),
        outputSchema: {
          type: 'object',
          definitions: { n: { type: 'array', items: { $ref: '#/definitions/n' } } },
          properties: { a: { $ref: '#/definitions/n' } },
        },
      },
      { name: 'deep-plain', script: deepArrays(250_000), outputSchema: { type: 'object' } },
    ]);
    for (const name of ['deep-ref', 'deep-plain']) {
      for (const json of [false, true]) {
        const r = await run(root, name, json);
        expect(r.code, `${name} ${json}: ${r.stderr.slice(0, 300)}`).not.toBe(INTERNAL);
        expect(r.stderr, name).not.toMatch(/internal error/);
        if (json) expect(() => JSON.parse(r.stdout) as unknown, name).not.toThrow();
      }
    }
  });

  it('input nested 250,000 deep against a recursive inputSchema is refused, not a crash', async () => {
    const root = await project([
      {
        name: 'deep-in',
        script: `echo '{}'\n`,
        inputSchema: { type: 'object', properties: { a: { $ref: '#' } } },
      },
    ]);
    const depth = 250_000;
    const file = path.join(root, 'deep.json');
    await writeFile(file, `${'{"a":'.repeat(depth)}{}${'}'.repeat(depth)}`);
    for (const json of [false, true]) {
      const r = await builtCli(
        [
          'run',
          'deep-in',
          '--grant',
          'run_capability:deep-in',
          '--input-file',
          file,
          ...(json ? ['--json'] : []),
        ],
        { cwd: root },
      );
      expect(r.code, r.stderr.slice(0, 300)).not.toBe(INTERNAL);
      expect(r.code).not.toBe(0);
    }
  });
});
