import { existsSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Capability } from '../../../src/manifest/types.js';
import { Executor } from '../../../src/executor/executor.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { createNonInteractivePrompter } from '../../../src/permissions/prompter.js';
import { Registry } from '../../../src/registry/registry.js';
import type { RunnerPermit } from '../../../src/runners/permit.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import type { RunRequest, Runner } from '../../../src/runners/types.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';

// The executor hands its runner a permit for the one run it allowed. Whoever holds that permit afterwards (a
// runner in the middle that kept it) cannot run with it again, nor run anything else with it.

const executors: Executor[] = [];
const runners: ShellRunner[] = [];
afterEach(async () => {
  for (const e of executors.splice(0)) await e.close();
  for (const r of runners.splice(0)) await r.close();
});

interface Kept {
  request: RunRequest;
  permit: RunnerPermit;
}

async function setup(): Promise<{ root: string; executor: Executor; kept: Kept[]; shell: ShellRunner }> {
  const { root, capRoot } = await tempProject('capsule-runner-permit-');
  await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  await writeCapability(capRoot, 'mark', {}, { 'run.sh': `touch '${path.join(root, 'marker')}'\n` });
  await writeCapability(capRoot, 'other', {}, { 'run.sh': `touch '${path.join(root, 'other-marker')}'\n` });
  const shell = new ShellRunner();
  runners.push(shell);
  const kept: Kept[] = [];
  // A runner in the middle: it passes the call on, and keeps what it was handed.
  const keeping: Runner = {
    environment: 'shell',
    available: () => shell.available(),
    close: async () => {},
    run: (request, permit) => {
      kept.push({ request, permit });
      return shell.run(request, permit);
    },
  };
  const executor = new Executor({
    registry: new Registry({ roots: ['capabilities'], projectRoot: root }),
    gate: await PermissionEngine.create({
      projectRoot: root,
      prompter: createNonInteractivePrompter(),
      sessionGrants: ['run_capability:mark'],
      audit: false,
    }),
    runners: [keeping],
  });
  executors.push(executor);
  return { root, executor, kept, shell };
}

describe('the permit the executor hands its runner', () => {
  it('control: an allowed call runs with a permit minted for the staged capability', async () => {
    const { root, executor, kept } = await setup();
    const { result, capability } = await executor.run('mark', {});
    expect(result.exitCode).toBe(0);
    expect(existsSync(path.join(root, 'marker'))).toBe(true);
    expect(kept).toHaveLength(1);
    expect(kept[0]?.request.capability).toBe(capability);
    expect(kept[0]?.permit).toMatchObject({ capability: 'mark', contentHash: capability.contentHash });
    expect(Object.isFrozen(kept[0]?.permit)).toBe(true);
  });

  it('kept after its run, it runs nothing again', async () => {
    const { root, executor, kept, shell } = await setup();
    await executor.run('mark', {});
    await rm(path.join(root, 'marker'));
    const { request, permit } = kept[0] as Kept;
    await expect(shell.run(request, permit)).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringMatching(/already used/),
    });
    expect(existsSync(path.join(root, 'marker'))).toBe(false);
  });

  it('kept after its run, it runs no other capability', async () => {
    const { root, executor, kept, shell } = await setup();
    await executor.run('mark', {});
    const other: Capability = await executor.registry.get('other');
    await expect(
      shell.run({ capability: other, input: '{}' }, (kept[0] as Kept).permit),
    ).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
    });
    expect(existsSync(path.join(root, 'other-marker'))).toBe(false);
  });

  it('each run gets its own: two allowed calls, two permits', async () => {
    const { executor, kept } = await setup();
    await executor.run('mark', {});
    await executor.run('mark', {});
    expect(kept).toHaveLength(2);
    expect(kept[0]?.permit).not.toBe(kept[1]?.permit);
  });
});
