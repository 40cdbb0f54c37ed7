import type { ContainerSpec, DockerEngine } from './engine.js';
import { parkedIdleMs, prepareContainer } from './call.js';
import type { PreparedContainer } from './call.js';

/** The pool's time: how old a parked container is, and when an unused one is dropped. */
export interface PoolClock {
  now(): number;
  /** Call `fn` once after `ms`; returns what cancels it. */
  after(ms: number, fn: () => void): () => void;
}

/** Real time; the timers do not keep the process alive. */
const SYSTEM_CLOCK: PoolClock = {
  now: () => performance.now(),
  after(ms, fn) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return () => clearTimeout(timer);
  },
};

export interface PrewarmPoolOptions {
  /** Idle prepared containers kept per configuration to begin with. 0 disables prewarming. */
  perKey: number;
  /**
   * What a configuration's count may grow to when calls find none ready (calls back to back or at once).
   * Default 4 (at least perKey).
   */
  maxPerKey?: number | undefined;
  /** A prepared container unused this long is removed and the count shrinks back by one. Default 15000. */
  idleMs?: number | undefined;
  /** Configurations kept warm at once; the least recently used one is dropped past it. */
  maxKeys: number;
  /** A parked container this close to its idle deadline is not handed out (it could expire before its call). */
  parkedMarginMs?: number | undefined;
  /** Default SYSTEM_CLOCK; tests drive their own, so they judge by effect without waiting. */
  clock?: PoolClock | undefined;
}

/**
 * Containers created and attached ahead of time, one configuration (image, mounts, limits…) per key.
 * Every container is used for exactly one call and then removed: nothing is shared between calls,
 * the pool only moves create+attach(+start) off the call's critical path. How many are kept ready follows
 * demand: a call that finds none ready raises its configuration's count (up to maxPerKey), prepared in
 * parallel; one that sits unused for idleMs lowers it again.
 */
export class PrewarmPool {
  private readonly engine: DockerEngine;
  private readonly options: PrewarmPoolOptions;
  private readonly idle = new Map<string, PreparedContainer[]>();
  private readonly filling = new Map<string, number>();
  /** Containers kept ready per key (between perKey and maxPerKey). */
  private readonly target = new Map<string, number>();
  /** Calls waiting for a container already being prepared, per key. */
  private readonly waiters = new Map<string, Array<(p: PreparedContainer | undefined) => void>>();
  private readonly pending = new Set<Promise<unknown>>();
  private readonly maxPerKey: number;
  private readonly idleMs: number;
  private readonly clock: PoolClock;
  private closed = false;

  constructor(engine: DockerEngine, options: PrewarmPoolOptions) {
    this.engine = engine;
    this.options = options;
    this.maxPerKey = Math.max(options.perKey, options.maxPerKey ?? 4);
    this.idleMs = options.idleMs ?? 15_000;
    this.clock = options.clock ?? SYSTEM_CLOCK;
  }

  /**
   * A prepared container for `spec`: an idle one when there is one; else the next one being prepared for
   * this key when more are coming than calls wait for them; else prepared now.
   */
  async take(key: string, spec: ContainerSpec): Promise<PreparedContainer> {
    const ready = this.takeIdle(key, spec);
    if (ready !== undefined) return ready;
    // Only a configuration the pool already prepares for shows demand (not a one-shot process's first call).
    if (this.options.perKey > 0 && this.target.has(key)) {
      // None ready: calls come faster than the pool is refilled.
      this.target.set(key, Math.min(this.maxPerKey, this.targetOf(key) + 1));
      const waiting = this.waiters.get(key) ?? [];
      if ((this.filling.get(key) ?? 0) > waiting.length) {
        const handed = await new Promise<PreparedContainer | undefined>((resolve) => {
          waiting.push(resolve);
          this.waiters.set(key, waiting);
        });
        if (handed !== undefined) return handed;
      }
    }
    return prepareContainer(this.engine, spec, this.clock.now);
  }

  /** Top the key up to its current count of idle containers in the background, prepared in parallel. */
  refill(key: string, spec: ContainerSpec): void {
    if (this.closed || this.options.perKey <= 0) return;
    if (!this.target.has(key)) this.target.set(key, this.options.perKey);
    const have = (this.idle.get(key)?.length ?? 0) + (this.filling.get(key) ?? 0);
    for (let i = have; i < this.targetOf(key); i++) {
      this.filling.set(key, (this.filling.get(key) ?? 0) + 1);
      let counted = false;
      const job = prepareContainer(this.engine, spec, this.clock.now)
        .then(async (prepared) => {
          if (this.closed) {
            prepared.stream.destroy();
            await this.engine.remove(prepared.id);
            return;
          }
          this.filling.set(key, (this.filling.get(key) ?? 1) - 1);
          counted = true;
          // A call already waiting for it takes it straight away.
          const waiter = this.waiters.get(key)?.shift();
          if (waiter !== undefined && !prepared.dead) {
            waiter(prepared);
            return;
          }
          waiter?.(undefined);
          const list = this.idle.get(key) ?? [];
          list.push(prepared);
          this.idle.delete(key);
          this.idle.set(key, list);
          // One that reaches its idle deadline exits on its own: drop it then, rather than at the next take.
          void prepared.ended.then(() => this.dropIdle(key, prepared));
          // Unused for idleMs: demand went down, keep one fewer ready.
          prepared.cancelIdle = this.clock.after(this.idleMs, () => {
            if (!this.dropIdle(key, prepared)) return;
            this.target.set(key, Math.max(this.options.perKey, this.targetOf(key) - 1));
          });
          await this.evict();
        })
        // A failed prewarm only costs the next call its head start.
        .catch(() => {})
        .finally(() => {
          if (!counted) {
            this.filling.set(key, (this.filling.get(key) ?? 1) - 1);
            // Nothing comes for the call waiting longest: it prepares its own.
            if ((this.waiters.get(key)?.length ?? 0) > (this.filling.get(key) ?? 0))
              this.waiters.get(key)?.shift()?.(undefined);
          }
          this.pending.delete(job);
        });
      this.pending.add(job);
    }
  }

  idleCount(): number {
    let n = 0;
    for (const list of this.idle.values()) n += list.length;
    return n;
  }

  /** Resolves once no container is being prepared (those started meanwhile included). */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  /** Remove every idle container and wait for prewarms in flight. */
  async close(): Promise<void> {
    this.closed = true;
    for (const list of this.waiters.values()) for (const w of list.splice(0)) w(undefined);
    await Promise.all([...this.pending]);
    const all = [...this.idle.values()].flat();
    this.idle.clear();
    await Promise.all(
      all.map(async (p) => {
        p.stream.destroy();
        await this.engine.remove(p.id).catch(() => {});
      }),
    );
  }

  private expiring(prepared: PreparedContainer, spec: ContainerSpec): boolean {
    const idle = parkedIdleMs(spec);
    if (!prepared.started || idle === undefined) return false;
    return this.clock.now() - prepared.parkedAt > idle - (this.options.parkedMarginMs ?? 0);
  }

  private targetOf(key: string): number {
    return this.target.get(key) ?? this.options.perKey;
  }

  private takeIdle(key: string, spec: ContainerSpec): PreparedContainer | undefined {
    const list = this.idle.get(key);
    let ready = list?.shift();
    // Skip (and remove) any that died while waiting or are about to reach their idle deadline.
    while (ready !== undefined && (ready.dead || this.expiring(ready, spec))) {
      const gone = ready;
      gone.cancelIdle?.();
      void this.engine.remove(gone.id).catch(() => {});
      ready = list?.shift();
    }
    if (list !== undefined) {
      // Re-insert: Map order is our LRU order.
      this.idle.delete(key);
      this.idle.set(key, list);
    }
    ready?.cancelIdle?.();
    return ready;
  }

  private dropIdle(key: string, prepared: PreparedContainer): boolean {
    const list = this.idle.get(key);
    const at = list?.indexOf(prepared) ?? -1;
    if (list === undefined || at < 0) return false;
    list.splice(at, 1);
    prepared.cancelIdle?.();
    prepared.stream.destroy();
    void this.engine.remove(prepared.id).catch(() => {});
    return true;
  }

  private async evict(): Promise<void> {
    while (this.idle.size > this.options.maxKeys) {
      const oldest = this.idle.keys().next().value;
      if (oldest === undefined) return;
      const list = this.idle.get(oldest) ?? [];
      this.idle.delete(oldest);
      await Promise.all(
        list.map(async (p) => {
          p.stream.destroy();
          await this.engine.remove(p.id).catch(() => {});
        }),
      );
    }
  }
}
