import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, realpath, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, cli } from '../../helpers/cli.js';
import { assemble } from '../runners/wasm/helpers.js';
import { writeCapability, writeManifest } from '../../helpers/capability.js';

/**
 * Manifests that can never run are refused where they are read: `capsule validate` exits 1 (its contract:
 * invalid manifests found) naming the capability's own capability.json and the field, and `capsule run`
 * refuses them with 65 (invalid data) before
 * anything starts (the entry would leave a marker). Each has a runnable neighbour that validates ok.
 */

interface Case {
  name: string;
  manifest: Record<string, unknown>;
  /** Files of the folder: text or bytes, and the mode to write them with. */
  files: Record<string, { data: string | Uint8Array; mode?: number }>;
  /** The field refused, or undefined for a neighbour that must validate ok. */
  field: string | undefined;
  message?: RegExp;
  /** The input a run is given. */
  input?: string;
}

async function project(): Promise<{ root: string; marker: string }> {
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-never-')));
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
  await mkdir(path.join(root, 'capabilities'));
  return { root, marker: path.join(root, 'MARKER') };
}

function cases(marker: string): Case[] {
  const touch = `touch ${marker}\necho '{}'\n`;
  const shell = (name: string, extra: Record<string, unknown>, mode: number, body: string): Case => ({
    name,
    manifest: { environment: 'shell', entry: 'run.sh', ...extra },
    files: { 'run.sh': { data: body, mode } },
    field: undefined,
  });
  const schema = (
    name: string,
    inputSchema: unknown,
    field: string | undefined,
    input = '{"n":3}',
  ): Case => ({
    ...shell(name, { interpreter: 'sh', inputSchema }, 0o644, touch),
    field,
    input,
  });
  const wasm = (name: string, data: string | Uint8Array): Case => ({
    name,
    manifest: { environment: 'wasm', entry: 'tool.wasm' },
    files: { 'tool.wasm': { data } },
    field: undefined,
    input: '{"name":"x"}',
  });
  return [
    {
      ...wasm('wasm-javascript', 'export function run(input) { return input; }\n'),
      field: 'entry',
      message: /tool\.wasm is not WebAssembly/,
    },
    {
      ...wasm('wasm-version-2', Uint8Array.from([0, 0x61, 0x73, 0x6d, 2, 0, 0, 0])),
      field: 'entry',
      message: /version or layer/,
    },
    wasm('wasm-module', assemble('probe.wat')),
    {
      ...shell('shell-no-exec-bit', {}, 0o644, touch),
      field: 'entry',
      message: /run\.sh is not executable and no "interpreter" is set/,
    },
    {
      ...shell('shell-shebang-no-exec-bit', {}, 0o644, `#!/bin/sh\n${touch}`),
      field: 'entry',
      message: /chmod \+x/,
    },
    // Runnable neighbours: an interpreter, or an exec bit (the host runs a script without #! with sh).
    shell('shell-interpreter', { interpreter: 'sh' }, 0o644, touch),
    shell('shell-exec-bit', {}, 0o755, touch),
    {
      name: 'docker-no-shebang',
      manifest: { environment: 'docker', entry: 'run.sh', docker: { image: 'capsule/busybox:1' } },
      files: { 'run.sh': { data: 'echo hi\n', mode: 0o755 } },
      field: 'entry',
      message: /no #! line/,
    },
    {
      name: 'docker-shebang',
      manifest: { environment: 'docker', entry: 'run.sh', docker: { image: 'capsule/busybox:1' } },
      files: { 'run.sh': { data: '#!/bin/sh\necho hi\n', mode: 0o755 } },
      field: undefined,
    },
    { ...schema('schema-not-anything', { not: {} }, 'inputSchema'), message: /"not" holds a schema/ },
    {
      ...schema(
        'schema-min-above-max',
        { type: 'object', properties: { n: { type: 'number', minimum: 5, maximum: 2 } }, required: ['n'] },
        'inputSchema',
      ),
      message: /required property "n".*at least 5 and at most 2/,
    },
    {
      ...schema('schema-const-vs-type', { type: 'object', const: 'hello' }, 'inputSchema'),
      message: /const/,
    },
    {
      ...schema('schema-lengths', { type: 'string', minLength: 4, maxLength: 1 }, 'inputSchema', '"ab"'),
      message: /minLength 4 is greater than maxLength 1/,
    },
    schema(
      'schema-min-below-max',
      { type: 'object', properties: { n: { type: 'number', minimum: 2, maximum: 5 } }, required: ['n'] },
      undefined,
    ),
    // The same bounds on a property that may be left out: {} is a valid input.
    schema(
      'schema-optional-never',
      { type: 'object', properties: { n: { type: 'number', minimum: 5, maximum: 2 } } },
      undefined,
      '{}',
    ),
  ];
}

async function writeCase(root: string, c: Case): Promise<string> {
  const dir = path.join(root, 'capabilities', c.name);
  const manifest = { schemaVersion: 1, name: c.name, description: `case ${c.name}`, ...c.manifest };
  const file = await writeManifest(dir, manifest);
  for (const [name, { data, mode }] of Object.entries(c.files))
    await writeFile(path.join(dir, name), data, { mode: mode ?? 0o644 });
  return file;
}

describe('manifests that can never run', async () => {
  const { root, marker } = await project();
  const all = cases(marker);
  const manifests = new Map<string, string>();
  for (const c of all) manifests.set(c.name, await writeCase(root, c));
  const refused = all.filter((c) => c.field !== undefined);
  const runnable = all.filter((c) => c.field === undefined);

  it.each(refused.map((c) => [c.name, c] as const))(
    '%s: validate exits 1 naming its capability.json and the field',
    async (_name, c) => {
      const manifest = manifests.get(c.name) as string;
      const v = await cli(['validate', path.dirname(manifest)], { cwd: root });
      expect(v.code).toBe(1);
      expect(v.stderr).toContain(`invalid ${c.name}`);
      expect(v.stderr).toContain(`${manifest}: ${c.field}: `);
      expect(v.stderr).toMatch(c.message as RegExp);
      expect(v.stderr).not.toMatch(/\n\s+at /);
    },
  );

  it.each(refused.filter((c) => c.manifest.environment !== 'docker').map((c) => [c.name, c] as const))(
    '%s: run exits 65 naming its capability.json, and nothing starts',
    async (_name, c) => {
      const manifest = manifests.get(c.name) as string;
      const r = await cli(
        ['run', c.name, '--grant', `run_capability:${c.name}`, '--input', c.input ?? '{}'],
        {
          cwd: root,
        },
      );
      expect(r.code).toBe(65);
      expect(r.stderr).toContain(manifest);
      expect(r.stderr).toMatch(c.message as RegExp);
      // capsule's own copy of the files is never what the message points at.
      expect(r.stderr).not.toMatch(/stag/i);
      expect(existsSync(marker)).toBe(false);
    },
  );

  it('the runnable neighbours validate ok, and the host ones run (the marker shows it)', async () => {
    for (const c of runnable) {
      const v = await cli(['validate', path.dirname(manifests.get(c.name) as string)], { cwd: root });
      expect({ name: c.name, code: v.code, stderr: v.stderr }).toEqual({ name: c.name, code: 0, stderr: '' });
      expect(v.stdout).toMatch(new RegExp(`^ok +${c.name} `));
    }
    for (const c of runnable.filter((x) => x.manifest.environment === 'shell')) {
      const r = await cli(
        ['run', c.name, '--grant', `run_capability:${c.name}`, '--input', c.input ?? '{}'],
        {
          cwd: root,
        },
      );
      expect({ name: c.name, code: r.code, stderr: r.stderr }).toEqual({ name: c.name, code: 0, stderr: '' });
      expect(existsSync(marker)).toBe(true);
      await writeFile(marker, '');
      const { rm } = await import('node:fs/promises');
      await rm(marker);
    }
  });

  it('the shipped capabilities all validate ok', async () => {
    const v = await cli(['validate', path.join(REPO_ROOT, 'capabilities')], { cwd: REPO_ROOT });
    expect(v.stderr).toBe('');
    expect(v.code).toBe(0);
  });

  it('a component entry is accepted as it is (hello.wasm)', async () => {
    const { root: other } = await project();
    const dir = await writeCapability(path.join(other, 'capabilities'), 'comp', {
      description: 'c',
      environment: 'wasm',
      entry: 'tool.wasm',
      interpreter: undefined,
    });
    await copyFile(path.join(REPO_ROOT, 'capabilities', 'hello', 'hello.wasm'), path.join(dir, 'tool.wasm'));
    const v = await cli(['validate', dir], { cwd: other });
    expect(v.code).toBe(0);
  });
});
