import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { compileModule, readCodeCache, useCodeCaches, writeCodeCache } from '../../../src/cli/code-cache.js';

const dirs: string[] = [];
function scratch(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'capsule-code-cache-'));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

// Two sources of the same length: V8's own check of a code cache compares little more than that.
const HONEST = "module.exports = () => 'honest';";
const PLANTED = "module.exports = () => 'forged';";

function exported(source: string, cachedData: Buffer | undefined): { value: unknown; rejected: boolean } {
  const { script, run } = compileModule(source, '/capsule/chunk.js', cachedData);
  const module = { exports: {} as unknown };
  run.call(module.exports, module.exports, () => undefined, module, '/capsule/chunk.js', '/capsule');
  return { value: (module.exports as () => unknown)(), rejected: script.cachedDataRejected === true };
}

describe('V8 code caches of the bundled CLI', () => {
  it('a cache is used for the source it was made from', () => {
    const file = path.join(scratch(), 'chunk.js.cache');
    writeCodeCache(file, HONEST, compileModule(HONEST, '/capsule/chunk.js', undefined).script);
    const cached = readCodeCache(file, HONEST);
    expect(cached).toBeDefined();
    expect(exported(HONEST, cached)).toEqual({ value: 'honest', rejected: false });
  });

  it('a cache made from other code (same length) is never used: the chunk runs its own source', () => {
    expect(PLANTED.length).toBe(HONEST.length);
    const file = path.join(scratch(), 'chunk.js.cache');
    writeCodeCache(file, PLANTED, compileModule(PLANTED, '/capsule/chunk.js', undefined).script);
    expect(readCodeCache(file, HONEST)).toBeUndefined();
    expect(exported(HONEST, readCodeCache(file, HONEST)).value).toBe('honest');
    // A cache file cut short, or one that is only a digest, is no cache either.
    writeFileSync(file, readFileSync(file).subarray(0, 32));
    expect(readCodeCache(file, PLANTED)).toBeUndefined();
  });

  it('modules in the bundle folder load through their caches; a planted cache loses to the source', () => {
    const dir = scratch();
    const chunk = path.join(dir, 'chunk.cjs');
    writeFileSync(chunk, HONEST);
    writeCodeCache(`${chunk}.cache`, PLANTED, compileModule(PLANTED, chunk, undefined).script);
    const restore = useCodeCaches(dir, { write: false });
    try {
      const load = createRequire(path.join(dir, 'index.cjs'));
      expect((load('./chunk.cjs') as () => string)()).toBe('honest');
    } finally {
      restore();
    }
  });
});
