import type { Capability, Environment } from '../manifest/types.js';
import { assertPermit, type RunnerPermit } from './permit.js';
import type { Runner, RunRequest, RunResult } from './types.js';

/**
 * A runner whose implementation is loaded and constructed on first use: a process that never runs a
 * capability of this environment never loads its module (dockerode and its gRPC stack, the component
 * toolchain) nor starts its workers or engine connection.
 */
export class LazyRunner implements Runner {
  #runner: Promise<Runner> | undefined;

  /** Set only when the loaded runner measures its isolation (so judging never loads it otherwise). */
  readonly measureIsolation: (() => Promise<string | undefined>) | undefined;

  /**
   * `options.warms`: the loaded runner has a start-up cost worth starting early (see Runner.warm), so
   * a warm() hint loads it. Otherwise warm() loads nothing: a call the gate then denies never pays
   * for the module (dockerode and its gRPC stack). `options.measures`: it measures its isolation.
   */
  constructor(
    readonly environment: Environment,
    private readonly load: () => Promise<Runner>,
    private readonly options: { warms?: boolean; measures?: boolean } = {},
  ) {
    this.measureIsolation =
      options.measures === true
        ? async () => {
            const runner = await this.#get();
            return runner.measureIsolation?.();
          }
        : undefined;
  }

  async available(): Promise<{ ok: true } | { ok: false; reason: string }> {
    return (await this.#get()).available();
  }

  async run(request: RunRequest, permit: RunnerPermit): Promise<RunResult> {
    // Refused before the module loads; the loaded runner spends the permit.
    assertPermit(permit, request.capability);
    return (await this.#get()).run(request, permit);
  }

  /** Passes the hint on, loading the runner for it only when it warms (see the constructor). */
  async warm(count?: number): Promise<void> {
    if (this.options.warms !== true) return;
    await (await this.#get()).warm?.(count);
  }

  /** Passes the hint on to a runner that warms (the same one a warm() hint loaded), loading no other. */
  async preload(capability: Capability): Promise<void> {
    if (this.options.warms !== true) return;
    await (await this.#get()).preload?.(capability);
  }

  async close(): Promise<void> {
    // Never loaded: nothing to release (and nothing is loaded just to close it).
    if (this.#runner === undefined) return;
    const runner = await this.#runner.catch(() => undefined);
    await runner?.close();
  }

  #get(): Promise<Runner> {
    return (this.#runner ??= this.load());
  }
}
