import { describe, expect, it } from 'vitest';
import { CapsuleError } from '../../../src/base/errors.js';
import { LazyRunner } from '../../../src/runners/lazy-runner.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import type { Runner } from '../../../src/runners/types.js';
import { makeCapability } from '../../helpers/capability.js';
import { permitFor } from '../../helpers/permit.js';

describe('LazyRunner', () => {
  it('loads nothing until used, and closing an unused one loads nothing either', async () => {
    let loads = 0;
    const lazy = new LazyRunner('shell', async () => {
      loads++;
      return new ShellRunner();
    });
    await lazy.close();
    expect(loads).toBe(0);
  });

  it('loads once on first use and runs through the loaded runner', async () => {
    let loads = 0;
    let closed = 0;
    const lazy = new LazyRunner('shell', async () => {
      loads++;
      const real = new ShellRunner();
      return {
        environment: real.environment,
        available: () => real.available(),
        run: (r, permit) => real.run(r, permit),
        close: async () => {
          closed++;
          await real.close();
        },
      } satisfies Runner;
    });
    const { capability } = await makeCapability('lazy', 'cat');
    const [a, b] = await Promise.all([
      lazy.run({ capability, input: '{"a":1}' }, permitFor(capability)),
      lazy.run({ capability, input: '{"b":2}' }, permitFor(capability)),
    ]);
    expect([a.stdout, b.stdout]).toEqual(['{"a":1}', '{"b":2}']);
    expect(await lazy.available()).toEqual({ ok: true });
    expect(loads).toBe(1);
    await lazy.close();
    expect(closed).toBe(1);
  });

  it('a load that fails fails the call (nothing runs) and close still resolves', async () => {
    const lazy = new LazyRunner('docker', () =>
      Promise.reject(new CapsuleError('RUNNER_UNAVAILABLE', 'cannot load the docker runner')),
    );
    const { capability } = await makeCapability('lazy-fail', 'echo ran');
    await expect(lazy.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'RUNNER_UNAVAILABLE',
    });
    await expect(lazy.close()).resolves.toBeUndefined();
  });

  it('a warm() hint loads nothing unless the runner warms, and then passes the count on', async () => {
    let loads = 0;
    const warmed: Array<number | undefined> = [];
    const fake = (): Runner => ({
      environment: 'wasm',
      available: async () => ({ ok: true }),
      run: async () => {
        throw new Error('not run');
      },
      warm: async (count) => {
        warmed.push(count);
      },
      close: async () => {},
    });
    const cold = new LazyRunner('wasm', async () => {
      loads++;
      return fake();
    });
    await cold.warm(1);
    expect(loads).toBe(0);
    expect(warmed).toEqual([]);
    const warming = new LazyRunner(
      'wasm',
      async () => {
        loads++;
        return fake();
      },
      { warms: true },
    );
    await warming.warm(1);
    await warming.warm(2);
    expect(loads).toBe(1);
    expect(warmed).toEqual([1, 2]);
  });
});
