import { existsSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isCapsuleError } from '../../../src/base/errors.js';
import { Executor } from '../../../src/executor/executor.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { createNonInteractivePrompter } from '../../../src/permissions/prompter.js';
import { Registry } from '../../../src/registry/registry.js';
import type { Runner } from '../../../src/runners/types.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { assemble } from '../runners/wasm/helpers.js';

// The executor hints the resolved capability's runner before the gate decides (a Wasm worker starts
// while the call is staged and judged). The hint must never be a way to run: a denied call's guest
// does nothing, judged by the file it would have written into its read-write grant.

const probe = assemble('probe.wat');
const executors: Executor[] = [];
afterEach(async () => {
  for (const e of executors.splice(0)) await e.close();
});

async function writerProject(): Promise<{ root: string; marker: string }> {
  const { root, capRoot } = await tempProject('capsule-warm-hint-');
  await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  await mkdir(path.join(root, 'out'));
  await writeCapability(
    capRoot,
    'writer',
    {
      description: 'writes a marker into its rw grant',
      environment: 'wasm',
      entry: 'writer.wasm',
      interpreter: undefined,
      args: ['write', 'marker.txt'],
      grants: { fs: [{ path: 'out', mode: 'rw' }] },
    },
    { 'writer.wasm': probe },
  );
  return { root, marker: path.join(root, 'out', 'marker.txt') };
}

async function executorFor(root: string, sessionGrants: string[], hints: number[]): Promise<Executor> {
  const wasm = new WasmRunner({ poolSize: 1 });
  // The real runner, with its hints counted: the test shows the hint came, and what it did not do.
  const counted: Runner = {
    environment: 'wasm',
    available: () => wasm.available(),
    run: (request, permit) => wasm.run(request, permit),
    warm: async (count) => {
      hints.push(count ?? 0);
      await wasm.warm(count);
    },
    close: () => wasm.close(),
  };
  const executor = new Executor({
    registry: new Registry({ roots: ['capabilities'], projectRoot: root }),
    gate: await PermissionEngine.create({
      projectRoot: root,
      sessionGrants,
      prompter: createNonInteractivePrompter(),
      audit: false,
    }),
    runners: [counted],
  });
  executors.push(executor);
  return executor;
}

describe('the runner hint before the gate', () => {
  it('a denied wasm call gets its worker started, and its guest never runs', async () => {
    const { root, marker } = await writerProject();
    const hints: number[] = [];
    const executor = await executorFor(root, [], hints);
    const err = await executor.run('writer', {}).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isCapsuleError(err) && err.code).toBe('PERMISSION_DENIED');
    expect(hints).toEqual([1]);
    expect(existsSync(marker)).toBe(false);
  });

  it('control: the same call granted writes the marker (the probe would have shown a run)', async () => {
    const { root, marker } = await writerProject();
    const hints: number[] = [];
    const executor = await executorFor(root, ['run_capability:writer'], hints);
    const { result } = await executor.run('writer', {});
    expect(result.exitCode).toBe(0);
    expect(hints).toEqual([1]);
    expect(readFileSync(marker, 'utf8')).toBe('pwned');
  });
});
