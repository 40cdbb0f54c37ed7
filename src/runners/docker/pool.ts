import type { ContainerSpec, DockerEngine } from './engine.js';
import { parkedIdleMs, prepareContainer } from './call.js';
import type { PreparedContainer } from './call.js';

export interface PrewarmPoolOptions {
  /** Idle prepared containers kept per configuration. 0 disables prewarming. */
  perKey: number;
  /** Configurations kept warm at once; the least recently used one is dropped past it. */
  maxKeys: number;
  /** A parked container this close to its idle deadline is not handed out (it could expire before its call). */
  parkedMarginMs?: number | undefined;
}

/**
 * Containers created and attached ahead of time, one configuration (image, mounts, limits…) per key.
 * Every container is used for exactly one call and then removed: nothing is shared between calls,
 * the pool only moves create+attach off the call's critical path.
 */
export class PrewarmPool {
  private readonly engine: DockerEngine;
  private readonly options: PrewarmPoolOptions;
  private readonly idle = new Map<string, PreparedContainer[]>();
  private readonly filling = new Map<string, number>();
  private readonly pending = new Set<Promise<unknown>>();
  private closed = false;

  constructor(engine: DockerEngine, options: PrewarmPoolOptions) {
    this.engine = engine;
    this.options = options;
  }

  /** A prepared container for `spec`: an idle one when there is one, else prepared now. */
  async take(key: string, spec: ContainerSpec): Promise<PreparedContainer> {
    const list = this.idle.get(key);
    let ready = list?.shift();
    // Skip (and remove) any that died while waiting or are about to reach their idle deadline.
    while (ready !== undefined && (ready.dead || this.expiring(ready, spec))) {
      const gone = ready;
      void this.engine.remove(gone.id).catch(() => {});
      ready = list?.shift();
    }
    if (list !== undefined) {
      // Re-insert: Map order is our LRU order.
      this.idle.delete(key);
      this.idle.set(key, list);
    }
    if (ready !== undefined) return ready;
    return prepareContainer(this.engine, spec);
  }

  /** Top the key up to `perKey` idle containers in the background. */
  refill(key: string, spec: ContainerSpec): void {
    if (this.closed || this.options.perKey <= 0) return;
    const have = (this.idle.get(key)?.length ?? 0) + (this.filling.get(key) ?? 0);
    for (let i = have; i < this.options.perKey; i++) {
      this.filling.set(key, (this.filling.get(key) ?? 0) + 1);
      const job = prepareContainer(this.engine, spec)
        .then(async (prepared) => {
          if (this.closed) {
            prepared.stream.destroy();
            await this.engine.remove(prepared.id);
            return;
          }
          const list = this.idle.get(key) ?? [];
          list.push(prepared);
          this.idle.delete(key);
          this.idle.set(key, list);
          // One that reaches its idle deadline exits on its own: drop it then, rather than at the next take.
          void prepared.ended.then(() => this.dropIdle(key, prepared));
          await this.evict();
        })
        // A failed prewarm only costs the next call its head start.
        .catch(() => {})
        .finally(() => {
          this.filling.set(key, (this.filling.get(key) ?? 1) - 1);
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

  /** Remove every idle container and wait for prewarms in flight. */
  async close(): Promise<void> {
    this.closed = true;
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
    return performance.now() - prepared.parkedAt > idle - (this.options.parkedMarginMs ?? 0);
  }

  private dropIdle(key: string, prepared: PreparedContainer): void {
    const list = this.idle.get(key);
    const at = list?.indexOf(prepared) ?? -1;
    if (list === undefined || at < 0) return;
    list.splice(at, 1);
    void this.engine.remove(prepared.id).catch(() => {});
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
