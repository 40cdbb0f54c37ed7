import { cp, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createNonInteractivePrompter } from '../../../src/permissions/prompter.js';
import { openRuntime } from '../../../src/runtime/runtime.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import { tempProject, writeCapability, writeManifest } from '../../helpers/capability.js';
import { REPO_ROOT } from '../../helpers/cli.js';

// The outputSchema is checked by the executor after every run, whatever the runner: here a real
// WASI module (shout-wasm upper-cases its input document) run by the real wasm runner.

async function shout(outputSchema: Record<string, unknown>) {
  const { root, capRoot } = await tempProject('capsule-outschema-');
  await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  const dir = path.join(capRoot, 'shout-wasm');
  await cp(path.join(REPO_ROOT, 'capabilities', 'shout-wasm'), dir, { recursive: true });
  const manifestFile = path.join(dir, 'capability.json');
  const manifest = JSON.parse(await readFile(manifestFile, 'utf8')) as Record<string, unknown>;
  await writeManifest(dir, { ...manifest, outputSchema });
  const runtime = await openRuntime({ cwd: root, grants: ['run_capability:shout-wasm'], stateDir: false });
  return runtime.openExecutor(
    await runtime.openGate({ prompter: createNonInteractivePrompter(), audit: false }),
  );
}

describe('outputSchema on the wasm runner', () => {
  it('matching output is returned parsed; output that breaks the schema is a failed run naming the field', async () => {
    const good = await shout({ type: 'object', required: ['N'], properties: { N: { type: 'integer' } } });
    try {
      const { result } = await good.run('shout-wasm', { n: 1 });
      expect(result.exitCode).toBe(0);
      expect(result.outputInvalid).toBeUndefined();
      expect(result.output).toEqual({ N: 1 });
    } finally {
      await good.close();
    }
    const strict = await shout({ type: 'object', required: ['n'] });
    try {
      const { result } = await strict.run('shout-wasm', { n: 1 });
      expect(result.exitCode).toBe(0);
      expect(result.output).toBeUndefined();
      expect(result.outputInvalid).toMatch(/must have required property 'n'/);
    } finally {
      await strict.close();
    }
  });
});

describe('outputSchema attacks', () => {
  it('a capability that loosens its own outputSchema on disk while it runs is still judged by the staged one', async () => {
    const { root, capRoot } = await tempProject('capsule-outschema-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const manifestFile = path.join(capRoot, 'sly', 'capability.json');
    const loose = JSON.stringify({
      schemaVersion: 1,
      name: 'sly',
      description: 'rewrites its manifest',
      environment: 'shell',
      entry: 'run.sh',
      interpreter: 'sh',
    });
    await writeCapability(
      capRoot,
      'sly',
      { outputSchema: { type: 'object', required: ['ok'], properties: { ok: { const: true } } } },
      { 'run.sh': `printf '%s' '${loose}' > '${manifestFile}'; printf '{"ok": false}'\n` },
    );
    const runtime = await openRuntime({
      cwd: root,
      grants: ['run_capability:sly'],
      runners: [new ShellRunner()],
      stateDir: false,
    });
    const executor = runtime.openExecutor(
      await runtime.openGate({ prompter: createNonInteractivePrompter(), audit: false }),
    );
    try {
      const { result } = await executor.run('sly', {});
      // The rewrite happened (by effect): the folder on disk now has no outputSchema at all.
      expect(JSON.parse(await readFile(manifestFile, 'utf8')).outputSchema).toBeUndefined();
      expect(result.exitCode).toBe(0);
      expect(result.output).toBeUndefined();
      expect(result.outputInvalid).toMatch(/output\.ok must be equal to constant/);
    } finally {
      await executor.close();
    }
  });
});
