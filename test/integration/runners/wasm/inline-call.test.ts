import { afterAll, describe, expect, it } from 'vitest';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import { assemble, rawSpec } from './helpers.js';

// A spinning preview1 guest with nothing granted never holds the runner's own thread, wherever it runs
// (a pooled worker today; running such calls on the runner's thread under a slice was tried, see
// docs/benchmarks.md, and these tests fail for it without the slice): timers still fire while the guest
// spins, a cancel still stops it, a timeout of 1 ms still holds, and a guest stopped mid-run leaves
// nothing for the next call of the same module.
const runner = new WasmRunner({ poolSize: 1 });
afterAll(() => runner.close());

const probe = assemble('probe.wat');
const markSpin = assemble('mark-spin.wat');
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

describe('WasmRunner: a preview1 call without grants never holds the runner’s thread', () => {
  it('a timer set before a spinning call fires while the guest still spins', async () => {
    // Compiled and held first: the spinning call then starts without waiting on anything.
    const warm = await runner.runRaw(rawSpec('probe.wasm', probe, 'warm', { args: ['cat'] }));
    expect(text(warm.stdout)).toBe('warm');
    await new Promise((resolve) => setImmediate(resolve));
    const order: string[] = [];
    setTimeout(() => order.push('timer'), 0);
    const r = await runner.runRaw(rawSpec('probe.wasm', probe, '', { args: ['ispin'], timeoutMs: 1_500 }));
    order.push('call');
    expect(r.timedOut).toBe(true);
    expect(order).toEqual(['timer', 'call']);
  });

  it('an AbortSignal set off by a timer cancels a spinning guest long before its timeout', async () => {
    const own = new WasmRunner({ poolSize: 1 });
    try {
      // A fresh runner: this module's first call, the one the runner may try on its own thread.
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 50);
      const r = await own.runRaw(
        rawSpec('probe.wasm', probe, '', { args: ['ispin'], timeoutMs: 600_000, signal: controller.signal }),
      );
      expect(r).toMatchObject({ canceled: true, timedOut: false, exitCode: null });
      const next = await own.runRaw(rawSpec('probe.wasm', probe, 'after the cancel', { args: ['cat'] }));
      expect(text(next.stdout)).toBe('after the cancel');
    } finally {
      await own.close();
    }
  }, 20_000);

  it('a timeout shorter than any slice still stops a spinning guest, and the next call works', async () => {
    const own = new WasmRunner({ poolSize: 1 });
    try {
      for (const timeoutMs of [1, 3, 20]) {
        const r = await own.runRaw(rawSpec('probe.wasm', probe, '', { args: ['ispin'], timeoutMs }));
        expect(r, `timeout ${timeoutMs}`).toMatchObject({ timedOut: true, exitCode: null });
      }
      const next = await own.runRaw(rawSpec('probe.wasm', probe, 'alive', { args: ['cat'] }));
      expect(text(next.stdout)).toBe('alive');
    } finally {
      await own.close();
    }
  });

  it('a guest stopped mid-loop leaves nothing in memory for the next call of the same module', async () => {
    for (let i = 0; i < 4; i++) {
      const own = new WasmRunner({ poolSize: 1 });
      try {
        const stopped = await own.runRaw(
          rawSpec('mark-spin.wasm', markSpin, '', { env: { SPIN: '1' }, timeoutMs: 1 + i * 40 }),
        );
        expect(stopped.timedOut, `round ${i}`).toBe(true);
        for (let j = 0; j < 3; j++) {
          const next = await own.runRaw(rawSpec('mark-spin.wasm', markSpin, ''));
          expect(text(next.stdout), `round ${i}, call ${j}`).toBe('b=0\n');
        }
      } finally {
        await own.close();
      }
    }
  });
});
