import type { Environment } from '../manifest/types.js';
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

  constructor(
    readonly environment: Environment,
    private readonly load: () => Promise<Runner>,
    options: { measures?: boolean } = {},
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

  async run(request: RunRequest): Promise<RunResult> {
    return (await this.#get()).run(request);
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
