/**
 * capsule's own WASI preview1 host: the `wasi_snapshot_preview1` import object of one call.
 * Every path_* call resolves through ConfinedDir beneath the directory fd it names (see
 * confined-dir.ts), straight on the granted host folders; fd_* calls work on host fds those opened.
 * Args, environment, clocks, random, poll_oneoff and in-memory stdio with caps complete it.
 * Rights are kept per fd (a preopen's are those of a directory; an opened fd gets what it asked
 * for within its directory's inheriting rights); read-only preopens refuse changes with EROFS.
 * The functions live by WASI area (proc.ts, clock.ts, fd.ts, path.ts, poll.ts) over one call's state
 * (call.ts).
 *
 * Self-contained (only `node:` imports and siblings that have only those): the worker loads it.
 */
import { ERRNO_OF, E } from './abi.js';
import {
  Preview1Call,
  Preview1Exit,
  WasiError,
  type Preview1Function,
  type Preview1Options,
} from './call.js';
import { CLOCK_FUNCTIONS } from './clock.js';
import { FD_FUNCTIONS } from './fd.js';
import { PATH_FUNCTIONS } from './path.js';
import { POLL_FUNCTIONS } from './poll.js';
import { PROC_FUNCTIONS } from './proc.js';

export interface Preview1Host {
  imports: Record<string, (...args: never[]) => number | undefined>;
  /** Closes every host fd the call opened (its preopens included). Safe to call twice. */
  close(): void;
}

/** Every preview1 function capsule defines, by name. */
const FUNCTIONS: Record<string, Preview1Function> = {
  ...PROC_FUNCTIONS,
  ...CLOCK_FUNCTIONS,
  ...FD_FUNCTIONS,
  ...PATH_FUNCTIONS,
  ...POLL_FUNCTIONS,
};

/** The wasi_snapshot_preview1 functions a module imports (what `names` of createPreview1 takes). */
export function preview1Imports(
  imports: ReadonlyArray<{ module: string; name: string; kind: string }>,
): string[] {
  return imports
    .filter((i) => i.module === 'wasi_snapshot_preview1' && i.kind === 'function')
    .map((i) => i.name);
}

/** Builds the import object of one call. Host fds are opened here and closed by `close()`. */
export function createPreview1(options: Preview1Options): Preview1Host {
  const call = new Preview1Call(options);
  // Every call: a WasiError is its errno; a host error with a code maps to preview1's; a guest
  // pointer outside its memory is EFAULT. Anything else (exit, output cap) stops the guest.
  const imports: Record<string, (...args: never[]) => number | undefined> = {};
  for (const name of options.names ?? Object.keys(FUNCTIONS)) {
    const fn = FUNCTIONS[name];
    // A name preview1 does not define stays unlinked: instantiating the module fails, as before.
    if (fn === undefined || !Object.hasOwn(FUNCTIONS, name)) continue;
    imports[name] = (...args: never[]) => {
      try {
        return fn(call, ...args);
      } catch (err) {
        if (err instanceof WasiError) return err.errno;
        if (err instanceof RangeError) return E.FAULT;
        const c = (err as { code?: unknown } | null)?.code;
        if (typeof c === 'string' && !(err instanceof Preview1Exit)) return ERRNO_OF[c] ?? E.IO;
        throw err;
      }
    };
  }
  return { imports, close: () => call.close() };
}
