// Test-only: `node --import <this file> …` with CAPSULE_CODE_CACHE_LOG=<file> appends, for every script
// compiled with a V8 code cache (the built CLI's chunks, src/cli/code-cache.ts), its file name and whether
// V8 rejected the cache: `<file> accepted|rejected`, one a line.
import { appendFileSync } from 'node:fs';
import vm from 'node:vm';

const log = process.env.CAPSULE_CODE_CACHE_LOG;
if (log !== undefined && log !== '') {
  const { Script } = vm;
  vm.Script = class LoggedScript extends Script {
    constructor(code, options) {
      super(code, options);
      if (options?.cachedData !== undefined)
        appendFileSync(log, `${options.filename} ${this.cachedDataRejected ? 'rejected' : 'accepted'}\n`);
    }
  };
}
