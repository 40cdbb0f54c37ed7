import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import { dockerForTests, tempCapability } from './helpers.js';
import { eventually } from '../../../helpers/eventually.js';
import { permitFor } from '../../../helpers/permit.js';
import { pastSleepOf } from '../../../helpers/processes.js';

/**
 * A stop is a stop in the docker runner too: once capsule decides a call is over (its deadline, a cancel),
 * no further command of its script runs. The script writes into a read-write grant, so its next command
 * would be seen on the host: `after` must never appear, waited past the moment it would have.
 */

const LATER_S = 2;

describe('a stop is a stop: docker calls', () => {
  let engine: DockerodeEngine;
  let runner: DockerRunner;
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    ({ engine } = await dockerForTests());
    runner = new DockerRunner({ engine, env: {} });
  });
  afterAll(async () => {
    await runner.close();
    await Promise.all(cleanups.map((c) => c()));
  });

  async function scene(name: string, reusable: boolean, timeoutMs: number) {
    const out = await realpath(await mkdtemp(path.join(tmpdir(), 'capsule-docker-stop-')));
    await mkdir(path.join(out, 'm'));
    await chmod(path.join(out, 'm'), 0o777);
    cleanups.push(() => rm(out, { recursive: true, force: true }));
    const t = await tempCapability(
      name,
      {
        entry: 'run.sh',
        grants: { fs: [{ path: 'm', mode: 'rw' }] },
        limits: { timeoutMs },
        docker: { image: 'capsule/busybox:1', reusable },
      },
      {
        'run.sh': `trap "" TERM INT; touch /project/m/started; sleep ${LATER_S}; touch /project/m/after\n`,
      },
    );
    cleanups.push(t.cleanup);
    t.capability.fsGrants = [{ declared: 'm', hostPath: path.join(out, 'm'), mode: 'rw' }];
    return { capability: t.capability, m: path.join(out, 'm') };
  }

  async function neverAfter(m: string): Promise<void> {
    await pastSleepOf(LATER_S);
    expect(await readdir(m)).toEqual(['started']);
  }

  for (const reusable of [false, true]) {
    const kind = reusable ? 'a reusable container' : 'a fresh container';
    it(`${kind} at its deadline: the next command never runs`, async () => {
      const { capability, m } = await scene(`stop-deadline-${reusable}`, reusable, 1500);
      const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
      expect(r.timedOut).toBe(true);
      expect(existsSync(path.join(m, 'started'))).toBe(true);
      await neverAfter(m);
    });

    it(`${kind} on cancel: the next command never runs`, async () => {
      const { capability, m } = await scene(`stop-cancel-${reusable}`, reusable, 30_000);
      const abort = new AbortController();
      const run = runner.run({ capability, input: '{}', signal: abort.signal }, permitFor(capability));
      await eventually(() => existsSync(path.join(m, 'started')), 'the call to start');
      abort.abort();
      expect((await run).canceled).toBe(true);
      await neverAfter(m);
    });
  }
});
