import { once } from 'node:events';
import { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { watchdogEntrypoint } from '../../../../src/runners/docker/call.js';
import type { ContainerSpec, DockerEngine } from '../../../../src/runners/docker/engine.js';
import { PrewarmPool, type PoolClock } from '../../../../src/runners/docker/pool.js';

/** Just enough engine for the pool: containers are ids, attach streams are in-memory duplexes. */
function fakeEngine() {
  let next = 0;
  const live = new Set<string>();
  const streams = new Map<string, Duplex>();
  const started = new Set<string>();
  const engine = {
    createContainer: async () => {
      const id = `c${next++}`;
      live.add(id);
      return id;
    },
    attach: async (id: string) => {
      const stream = new Duplex({
        read() {},
        write(_c, _e, cb) {
          cb();
        },
      });
      streams.set(id, stream);
      return stream;
    },
    start: async (id: string) => {
      started.add(id);
    },
    remove: async (id: string) => {
      live.delete(id);
    },
  } as unknown as DockerEngine;
  return { engine, live, streams, started };
}

const spec = (image: string, gated = false, idleMs = 60_000): ContainerSpec =>
  ({ image, entrypoint: gated ? watchdogEntrypoint(1000, idleMs) : [] }) as unknown as ContainerSpec;
/** A clock the test moves by hand: nothing in these tests waits for real time to pass. */
function manualClock(): PoolClock & { advance(ms: number): void } {
  let t = 0;
  let timers: Array<{ at: number; fn: () => void }> = [];
  return {
    now: () => t,
    after(ms, fn) {
      const timer = { at: t + ms, fn };
      timers.push(timer);
      return () => {
        timers = timers.filter((x) => x !== timer);
      };
    },
    advance(ms) {
      t += ms;
      const due = timers.filter((x) => x.at <= t).sort((a, b) => a.at - b.at);
      timers = timers.filter((x) => x.at > t);
      for (const x of due) x.fn();
    },
  };
}

describe('PrewarmPool', () => {
  it('grows when calls find it empty (prepared in parallel, bounded) and shrinks back when unused', async () => {
    const { engine, live } = fakeEngine();
    const clock = manualClock();
    const pool = new PrewarmPool(engine, { perKey: 1, maxPerKey: 3, maxKeys: 4, idleMs: 40, clock });
    // A configuration the pool prepares for; then calls come faster than it is refilled.
    pool.refill('k', spec('a'));
    await pool.settled();
    const taken = [];
    for (let i = 0; i < 6; i++) taken.push(await pool.take('k', spec('a')));
    pool.refill('k', spec('a'));
    await pool.settled();
    // Five calls found it empty; the count grew to its bound, not past it.
    expect(pool.idleCount()).toBe(3);
    clock.advance(39);
    expect(pool.idleCount()).toBe(3);
    clock.advance(1);
    // Unused: each one went, lowering the count back towards perKey.
    expect(pool.idleCount()).toBe(0);
    pool.refill('k', spec('a'));
    await pool.settled();
    expect(pool.idleCount()).toBeLessThan(3);
    expect(live.size).toBe(taken.length + pool.idleCount());
    await pool.close();
  });

  it('a call that finds none ready takes the one being prepared instead of making its own', async () => {
    const { engine, live } = fakeEngine();
    const pool = new PrewarmPool(engine, { perKey: 1, maxKeys: 4 });
    pool.refill('k', spec('a'));
    const got = await pool.take('k', spec('a'));
    expect(live.size).toBe(1);
    expect(got.id).toBe('c0');
    await pool.close();
  });

  it('hands out a prepared container once, then prepares a fresh one', async () => {
    const { engine, live } = fakeEngine();
    const pool = new PrewarmPool(engine, { perKey: 1, maxKeys: 4 });
    pool.refill('k', spec('a'));
    await pool.settled();
    expect(pool.idleCount()).toBe(1);
    const first = await pool.take('k', spec('a'));
    const second = await pool.take('k', spec('a'));
    expect(first.id).not.toBe(second.id);
    expect(live.size).toBe(2);
    await pool.close();
  });

  it('starts gated specs ahead, not plain ones', async () => {
    const { engine, started } = fakeEngine();
    const pool = new PrewarmPool(engine, { perKey: 1, maxKeys: 4 });
    const gated = await pool.take('g', spec('a', true));
    const plain = await pool.take('p', spec('a'));
    expect(gated.started).toBe(true);
    expect(started.has(gated.id)).toBe(true);
    expect(plain.started).toBe(false);
    expect(started.has(plain.id)).toBe(false);
  });

  it('never hands out a parked container close to its idle deadline, and drops one that expired', async () => {
    const { engine, live, streams } = fakeEngine();
    const clock = manualClock();
    const pool = new PrewarmPool(engine, { perKey: 1, maxPerKey: 1, maxKeys: 4, parkedMarginMs: 40, clock });
    const parked = spec('a', true, 60);
    pool.refill('k', parked);
    await pool.settled();
    const [old] = [...live];
    // Outside its margin of the 60 ms deadline it is handed out; within it, a fresh one is prepared
    // instead and the old one removed.
    clock.advance(20);
    const early = await pool.take('k', parked);
    expect(early.id).toBe(old);
    pool.refill('k', parked);
    await pool.settled();
    const [second] = [...live].filter((id) => id !== old);
    clock.advance(21);
    const taken = await pool.take('k', parked);
    expect(taken.id).not.toBe(second);
    expect(taken.id).not.toBe(old);
    expect(live.has(second ?? '')).toBe(false);
    // One that reaches its deadline while idle (its stream ends) leaves the pool and the engine at once.
    pool.refill('k', parked);
    await pool.settled();
    const idle = [...live].find((id) => id !== taken.id && id !== old) ?? '';
    const stream = streams.get(idle) as Duplex;
    stream.destroy();
    await once(stream, 'close');
    expect(pool.idleCount()).toBe(0);
    expect(live.has(idle)).toBe(false);
    await pool.close();
  });

  it('skips and removes a container that died while waiting', async () => {
    const { engine, live, streams } = fakeEngine();
    const pool = new PrewarmPool(engine, { perKey: 1, maxKeys: 4 });
    pool.refill('k', spec('a'));
    await pool.settled();
    const [deadId] = [...live];
    const stream = streams.get(deadId ?? '') as Duplex;
    stream.destroy();
    await once(stream, 'close');
    const taken = await pool.take('k', spec('a'));
    expect(taken.id).not.toBe(deadId);
    expect(live.has(deadId ?? '')).toBe(false);
  });

  it('keeps at most maxKeys configurations warm, dropping the least recently used', async () => {
    const { engine, live } = fakeEngine();
    const pool = new PrewarmPool(engine, { perKey: 1, maxKeys: 2 });
    for (const k of ['a', 'b', 'c']) {
      pool.refill(k, spec(k));
      await pool.settled();
    }
    expect(pool.idleCount()).toBe(2);
    expect(live.size).toBe(2);
    await pool.close();
    expect(live.size).toBe(0);
  });

  it('prewarm 0 prepares nothing ahead; close() removes containers whose creation was in flight', async () => {
    const { engine, live } = fakeEngine();
    const none = new PrewarmPool(engine, { perKey: 0, maxKeys: 2 });
    none.refill('k', spec('a'));
    await none.settled();
    expect(live.size).toBe(0);
    const pool = new PrewarmPool(engine, { perKey: 2, maxKeys: 2 });
    pool.refill('k', spec('a'));
    await pool.close();
    expect(live.size).toBe(0);
  });
});
