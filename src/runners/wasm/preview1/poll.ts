/**
 * preview1's poll_oneoff: clock subscriptions sleep (interruptibly), fd ones are always ready.
 *
 * Self-contained (only `node:` imports and siblings that have only those): the worker loads it.
 */
import { fstatSync } from 'node:fs';
import { CLOCK, E, EVENTTYPE } from './abi.js';
import type { Preview1Function } from './call.js';

/** Subscription `i` at `inAt`: where it is, its event type, and its fd (or, for a clock, the clock's id). */
function subscription(dv: DataView, inAt: number, i: number): { sub: number; type: number; id: number } {
  const sub = inAt + i * 48;
  return { sub, type: dv.getUint8(sub + 8), id: dv.getUint32(sub + 16, true) };
}

export const POLL_FUNCTIONS: Record<string, Preview1Function> = {
  poll_oneoff: (c, inPtr: number, outPtr: number, nsubs: number, neventsPtr: number) => {
    const n = nsubs >>> 0;
    if (n === 0) return E.INVAL;
    const dv = c.mem();
    const inAt = inPtr >>> 0;
    const outAt = outPtr >>> 0;
    let count = 0;
    const event = (i: number, type: number, errno: number, nbytes: bigint, flags: number): void => {
      const ev = outAt + count * 32;
      dv.setBigUint64(ev, dv.getBigUint64(inAt + i * 48, true), true);
      dv.setUint16(ev + 8, errno, true);
      dv.setUint8(ev + 10, type);
      dv.setBigUint64(ev + 16, nbytes, true);
      dv.setUint16(ev + 24, flags, true);
      count += 1;
    };
    const waits: Array<bigint | undefined> = [];
    let anyReady = false;
    for (let i = 0; i < n; i++) {
      const { sub, type, id: clockId } = subscription(dv, inAt, i);
      if (type === EVENTTYPE.CLOCK) {
        const timeout = dv.getBigUint64(sub + 24, true);
        const absolute = (dv.getUint16(sub + 40, true) & 1) !== 0;
        const now = clockId === CLOCK.REALTIME ? BigInt(Date.now()) * 1_000_000n : process.hrtime.bigint();
        waits.push(absolute ? (timeout > now ? timeout - now : 0n) : timeout);
      } else {
        waits.push(undefined);
        anyReady = true;
      }
    }
    if (anyReady) {
      // Streams here are memory or regular files: always ready.
      for (let i = 0; i < n; i++) {
        if (waits[i] !== undefined) continue;
        const { type, id: fd } = subscription(dv, inAt, i);
        const e = c.table.get(fd);
        if (e === undefined) event(i, type, E.BADF, 0n, 0);
        else if (type === EVENTTYPE.FD_READ) {
          let left = 0n;
          if (e.kind === 'stdio') left = e.n === 0 ? BigInt(c.options.stdin.length - c.stdinPos) : 0n;
          else if (e.kind === 'file') {
            const size = fstatSync(e.fd, { bigint: true }).size;
            left = size > e.pos ? size - e.pos : 0n;
          }
          event(i, type, E.SUCCESS, left, e.kind === 'stdio' && left === 0n ? 1 : 0);
        } else event(i, type, E.SUCCESS, 65_536n, 0);
      }
    } else {
      const clocks = waits.filter((w): w is bigint => w !== undefined);
      const least = clocks.reduce((a, b) => (b < a ? b : a));
      // Atomics.wait, not a native sleep: worker.terminate() interrupts it at the call's timeout.
      if (least > 0n) {
        c.sleeper ??= new Int32Array(new SharedArrayBuffer(4));
        Atomics.wait(c.sleeper, 0, 0, Number(least / 1_000n) / 1_000);
      }
      waits.forEach((w, i) => {
        if (w === least) event(i, EVENTTYPE.CLOCK, E.SUCCESS, 0n, 0);
      });
    }
    dv.setUint32(neventsPtr >>> 0, count, true);
    return E.SUCCESS;
  },
};
