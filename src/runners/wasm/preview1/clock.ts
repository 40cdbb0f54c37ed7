/**
 * preview1's clocks: wall time, monotonic time, and the process's CPU time.
 *
 * Self-contained (only `node:` imports and siblings that have only those): the worker loads it.
 */
import { CLOCK, E } from './abi.js';
import type { Preview1Function } from './call.js';

export const CLOCK_FUNCTIONS: Record<string, Preview1Function> = {
  clock_res_get: (c, id: number, out: number) => {
    if (id < 0 || id > 3) return E.INVAL;
    c.mem().setBigUint64(out >>> 0, id === CLOCK.REALTIME ? 1_000_000n : 1_000n, true);
    return E.SUCCESS;
  },
  clock_time_get: (c, id: number, _precision: bigint, out: number) => {
    let t: bigint;
    if (id === CLOCK.REALTIME) t = BigInt(Date.now()) * 1_000_000n;
    else if (id === CLOCK.MONOTONIC) t = process.hrtime.bigint();
    else if (id === CLOCK.PROCESS_CPUTIME || id === CLOCK.THREAD_CPUTIME) {
      const u = process.cpuUsage();
      t = BigInt(u.user + u.system) * 1_000n;
    } else return E.INVAL;
    c.mem().setBigUint64(out >>> 0, t, true);
    return E.SUCCESS;
  },
};
