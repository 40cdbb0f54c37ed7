import { mkdtemp, readFile, stat, writeFile, mkdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { builtCli } from '../../../helpers/cli.js';
import { assemble } from './helpers.js';

// The built binary, as users run it (scripts/test.mjs builds dist first): this also proves the
// compiled worker.js loads from dist, not only the on-the-fly transpiled one vitest uses.
describe('capsule wasm run (built CLI)', () => {
  let dir: string;
  let probe: string;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'capsule-wasm-cli-'));
    probe = path.join(dir, 'probe.wasm');
    await writeFile(probe, assemble('probe.wat'));
    await mkdir(path.join(dir, 'data'));
    await writeFile(path.join(dir, 'data', 'f.txt'), 'file content\n');
  });

  it('passes the proc_exit code and stderr through unchanged', async () => {
    const r = await builtCli(['wasm', 'run', probe, '--', 'xit', '7']);
    expect(r).toMatchObject({ code: 7, stdout: '', stderr: 'bye' });
  });

  it('caps what the module writes to its --dir folders at --write-bytes (ENOSPC, and a line says so)', async () => {
    const r = await builtCli([
      'wasm',
      'run',
      probe,
      '--write-bytes',
      '100000',
      '--dir',
      `${path.join(dir, 'data')}::/w`,
      '--',
      'Fill',
      'fill.bin',
    ]);
    expect(r.code).toBe(51);
    expect(r.stderr).toMatch(/errno=51\ncapsule: write limit of 100000 bytes reached \(--write-bytes\)/);
    expect((await stat(path.join(dir, 'data', 'fill.bin'))).size).toBeLessThanOrEqual(100_000);
  });

  it('passes stdin to the module and its stdout back', async () => {
    const r = await builtCli(['wasm', 'run', probe, '--', 'cat'], { input: 'piped input' });
    expect(r).toMatchObject({ code: 0, stdout: 'piped input' });
  });

  it('preopens --dir HOST::GUEST (read-write, written back) and sets only --env variables', async () => {
    const read = await builtCli([
      'wasm',
      'run',
      probe,
      '--dir',
      `${path.join(dir, 'data')}::/w`,
      '--',
      'read',
      'f.txt',
    ]);
    expect(read).toMatchObject({ code: 0, stdout: 'file content' });
    const write = await builtCli([
      'wasm',
      'run',
      probe,
      '--dir',
      path.join(dir, 'data'),
      '--',
      'write',
      'out.txt',
    ]);
    expect(write.code).toBe(0);
    expect(await readFile(path.join(dir, 'data', 'out.txt'), 'utf8')).toBe('pwned');
    const env = await builtCli(['wasm', 'run', probe, '--env', 'GREETING=hi there', '--', 'env']);
    expect(env).toMatchObject({ code: 0, stdout: 'GREETING=hi there' });
  });

  it('exits 134 on a trap and 124 on a timeout, like wasmtime / timeout(1)', async () => {
    const trap = await builtCli(['wasm', 'run', probe, '--memory-mb', '16', '--', 'malloc']);
    expect(trap.code).toBe(134);
    expect(trap.stderr).toMatch(/wasm trap: unreachable/);
    const slow = await builtCli(['wasm', 'run', probe, '--timeout-ms', '300', '--', 'ispin']);
    expect(slow.code).toBe(124);
    expect(slow.stderr).toMatch(/300 ms time limit/);
  });

  it('reports a missing or malformed module as a user error, without a stack trace', async () => {
    const missing = await builtCli(['wasm', 'run', path.join(dir, 'nope.wasm')]);
    expect(missing.code).toBe(66);
    expect(missing.stderr).toMatch(/cannot read .*nope\.wasm/);
    await writeFile(path.join(dir, 'junk.wasm'), 'junk');
    const junk = await builtCli(['wasm', 'run', path.join(dir, 'junk.wasm')]);
    expect(junk.code).toBe(1);
    expect(junk.stderr).toMatch(/junk\.wasm is not a WebAssembly binary/);
    expect(junk.stderr).not.toMatch(/\n\s+at /);
  });

  it('runs the README main job on the Wasm runner', async () => {
    const r = await builtCli([
      'run',
      'hello',
      '--grant',
      'run_capability:hello',
      '--input',
      '{"name":"world"}',
    ]);
    expect(r).toMatchObject({ code: 0, stdout: 'Hello, world!' });
  });
});
