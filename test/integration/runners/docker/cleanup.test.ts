import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import { eventually } from '../../../helpers/eventually.js';
import { dockerForTests, tempCapability } from './helpers.js';
import { permitFor } from '../../../helpers/permit.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const built = path.resolve(here, '../../../../dist/runners/docker/runner.js');

/** Wait until `check` holds (test/helpers/eventually.ts); fails the test with `what` after `ms`. */
async function until(what: string, check: () => Promise<boolean>, ms = 20_000): Promise<void> {
  await eventually(check, what, { timeoutMs: ms, intervalMs: 100 });
}

// These kill a real capsule process mid-call, so they drive the built runner (npm run build; scripts/test.mjs does it).
describe('docker runner cleanup', () => {
  let engine: DockerodeEngine;
  let capabilityDir: string;
  let cleanup: () => Promise<void>;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    if (!existsSync(built)) throw new Error(`${built} is missing: run "npm run build" first`);
    ({ engine } = await dockerForTests());
    const t = await tempCapability(
      'long-call',
      { entry: 'run.sh', limits: { timeoutMs: 120_000 } },
      { 'run.sh': 'echo started; sleep 120\n' },
    );
    capabilityDir = t.dir;
    cleanup = t.cleanup;
  });

  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    await cleanup();
  });

  function startChild(handleSignals: boolean): ChildProcess {
    const child = spawn(
      process.execPath,
      [path.join(here, 'child-runner.mjs'), capabilityDir, handleSignals ? 'yes' : 'no'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(child);
    return child;
  }

  const running = async (pid: number | undefined): Promise<number> =>
    (await engine.listContainers([`capsule.pid=${pid}`, 'capsule.role=call'])).filter(
      (c) => c.state === 'running',
    ).length;
  const all = async (pid: number | undefined): Promise<number> =>
    (await engine.listContainers([`capsule.pid=${pid}`])).length;

  it('SIGINT of capsule mid-call removes its containers before it exits', async () => {
    const child = startChild(true);
    await until('the child call to be running', async () => (await running(child.pid)) >= 1);
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.once('exit', (_code, signal) => resolve(signal)),
    );
    child.kill('SIGINT');
    expect(await exited).toBe('SIGINT');
    // Nothing left, at once: not the call, not the prewarmed one.
    expect(await all(child.pid)).toBe(0);
  });

  it('containers left by a crashed (SIGKILLed) capsule are removed when the next runner starts', async () => {
    const child = startChild(false);
    await until('the child call to be running', async () => (await running(child.pid)) >= 1);
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGKILL');
    await exited;
    // The crash left it behind, still running.
    expect(await running(child.pid)).toBeGreaterThanOrEqual(1);
    const next = new DockerRunner({ env: process.env, engine, prewarm: 0 });
    try {
      const reaped = await next.reapOrphans();
      expect(reaped).toBeGreaterThanOrEqual(1);
      const left = await engine.listContainers([`capsule.pid=${child.pid}`]);
      // A create the dead process had already sent may land just after the listing; the next reap gets it.
      if (left.length > 0) console.log('left after first reap:', JSON.stringify(left));
      await until(
        'every orphan removed',
        async () => {
          await next.reapOrphans();
          return (await all(child.pid)) === 0;
        },
        5000,
      );
    } finally {
      await next.close();
    }
  });

  it('reaping never touches containers of live capsule processes', async () => {
    const a = new DockerRunner({ env: process.env, engine, prewarm: 1 });
    const t = await tempCapability('live-one', { entry: 'run.sh' }, { 'run.sh': 'echo hi\n' });
    try {
      await a.run({ capability: t.capability, input: '{}' }, permitFor(t.capability));
      await a.prewarm(t.capability);
      // The call's own container is removed in the background: wait until only the prewarmed one is
      // left (the same non-empty set five polls in a row), so a removal by `a` is not taken for a reap.
      const ids = async (): Promise<string> =>
        (await engine.listContainers([`capsule.pid=${process.pid}`, 'capsule.capability=live-one']))
          .map((c) => c.id)
          .sort()
          .join(',');
      let seen = '';
      let steady = 0;
      await until('a prewarmed container, and nothing else of the call', async () => {
        const now = await ids();
        steady = now !== '' && now === seen ? steady + 1 : 0;
        seen = now;
        return steady >= 5;
      });
      const b = new DockerRunner({ env: process.env, engine, prewarm: 0 });
      await b.reapOrphans();
      await b.close();
      expect(await ids()).toBe(seen);
    } finally {
      await a.close();
      await t.cleanup();
    }
    expect(
      await engine.listContainers([`capsule.pid=${process.pid}`, 'capsule.capability=live-one']),
    ).toEqual([]);
  });
});
