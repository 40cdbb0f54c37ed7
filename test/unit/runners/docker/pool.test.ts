import { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { GATE_ENTRYPOINT } from '../../../../src/runners/docker/call.js';
import type { ContainerSpec, DockerEngine } from '../../../../src/runners/docker/engine.js';
import { PrewarmPool } from '../../../../src/runners/docker/pool.js';

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

const spec = (image: string, gated = false): ContainerSpec =>
  ({ image, entrypoint: gated ? [...GATE_ENTRYPOINT] : [] }) as unknown as ContainerSpec;
const settle = () => new Promise((r) => setTimeout(r, 10));

describe('PrewarmPool', () => {
  it('hands out a prepared container once, then prepares a fresh one', async () => {
    const { engine, live } = fakeEngine();
    const pool = new PrewarmPool(engine, { perKey: 1, maxKeys: 4 });
    pool.refill('k', spec('a'));
    await settle();
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

  it('skips and removes a container that died while waiting', async () => {
    const { engine, live, streams } = fakeEngine();
    const pool = new PrewarmPool(engine, { perKey: 1, maxKeys: 4 });
    pool.refill('k', spec('a'));
    await settle();
    const [deadId] = [...live];
    streams.get(deadId ?? '')?.destroy();
    await settle();
    const taken = await pool.take('k', spec('a'));
    expect(taken.id).not.toBe(deadId);
    await settle();
    expect(live.has(deadId ?? '')).toBe(false);
  });

  it('keeps at most maxKeys configurations warm, dropping the least recently used', async () => {
    const { engine, live } = fakeEngine();
    const pool = new PrewarmPool(engine, { perKey: 1, maxKeys: 2 });
    for (const k of ['a', 'b', 'c']) {
      pool.refill(k, spec(k));
      await settle();
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
    await settle();
    expect(live.size).toBe(0);
    const pool = new PrewarmPool(engine, { perKey: 2, maxKeys: 2 });
    pool.refill('k', spec('a'));
    await pool.close();
    expect(live.size).toBe(0);
  });
});
