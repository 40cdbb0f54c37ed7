import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import { makeCapability } from '../../helpers/capability.js';
import { eventually } from '../../helpers/eventually.js';
import { survivors } from '../../helpers/processes.js';
import { permitFor } from '../../helpers/permit.js';

describe('ShellRunner', () => {
  const runner = new ShellRunner({
    hostEnv: { ...process.env, GRANTED_VAR: 'visible', SECRET_TOKEN: 'hunter2' },
  });
  afterAll(() => runner.close());

  it('passes input on stdin, runs in the capability folder, returns exit code and output', async () => {
    const { capability } = await makeCapability('echo', 'pwd; cat; echo; echo oops >&2; exit 3\n');
    const r = await runner.run({ capability, input: '{"a":1}' }, permitFor(capability));
    expect(r).toMatchObject({
      environment: 'shell',
      exitCode: 3,
      signal: null,
      timedOut: false,
      truncated: false,
      canceled: false,
    });
    expect(r.stdout).toBe(`${capability.dir}\n{"a":1}\n`);
    expect(r.stderr).toBe('oops\n');
    expect(r.durationMs).toBeGreaterThan(0);
  });

  it('scrubs the environment down to a fixed PATH and the granted variables', async () => {
    const { capability } = await makeCapability('env', 'env | sort\n', {
      grants: { env: ['GRANTED_VAR', 'NOT_SET_ANYWHERE'] },
    });
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    const vars = r.stdout
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('PWD='));
    expect(vars).toEqual(['GRANTED_VAR=visible', 'PATH=/usr/local/bin:/usr/bin:/bin']);
    expect(r.stdout).not.toContain('hunter2');
  });

  it('kills the whole process tree at the wall-clock limit, even a SIGTERM-ignoring one', async () => {
    const { capability, root } = await makeCapability(
      'stubborn',
      `trap '' TERM\n(trap '' TERM; sleep 30; echo survived > "${'$'}1") &\nsleep 30\n`,
      { limits: { timeoutMs: 300 }, args: [] },
    );
    const marker = path.join(root, 'survived');
    capability.manifest.args.push(marker);
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.timedOut).toBe(true);
    expect(r.exitCode).toBeNull();
    expect(r.signal).toBe('SIGKILL');
    // The subshell's command line carries the capability's folder (its entry path).
    expect(await survivors(capability.dir)).toEqual([]);
    expect(existsSync(marker)).toBe(false);
  });

  it('kills a grandchild that outlives its parent', async () => {
    const { capability } = await makeCapability('orphan', 'sh -c "sleep 30" "$0" &\nexit 0\n');
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.exitCode).toBe(0);
    expect(await survivors(capability.dir)).toEqual([]);
  });

  // How fast and in how much memory: bench/limits.mjs.
  it('caps a 1 GB output flood and kills the process tree', async () => {
    const { capability } = await makeCapability('flood', 'head -c 1000000000 /dev/zero | tr "\\0" x\n', {
      limits: { outputBytes: 65536, timeoutMs: 20_000 },
    });
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBe(65536);
    expect(r.exitCode).toBeNull();
    expect(r.signal).toBe('SIGKILL');
    expect(await survivors(capability.dir)).toEqual([]);
  });

  it('cancels on AbortSignal and reports it', async () => {
    const { capability } = await makeCapability('slow', 'touch started; sleep 30\n');
    const abort = new AbortController();
    const run = runner.run({ capability, input: '{}', signal: abort.signal }, permitFor(capability));
    // Abort once it really runs, not after a guessed delay.
    await eventually(() => existsSync(path.join(capability.dir, 'started')), 'the capability to start');
    abort.abort();
    const r = await run;
    expect(r.canceled).toBe(true);
    expect(r.timedOut).toBe(false);
    expect(await survivors(capability.dir)).toEqual([]);
  });

  it('does not fail when the capability ignores its stdin', async () => {
    const { capability } = await makeCapability('deaf', 'exit 0\n');
    const r = await runner.run({ capability, input: 'x'.repeat(2_000_000) }, permitFor(capability));
    expect(r.exitCode).toBe(0);
  });

  it('reports an entry that cannot be executed as a clear error', async () => {
    const { capability } = await makeCapability('noexec', 'echo hi\n', {}, {});
    delete capability.manifest.interpreter;
    capability.entryPath = path.join(capability.dir, 'capability.json');
    await expect(runner.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'RUNNER_FAILED',
      details: { field: 'entry' },
    });
  });
});

describe('ShellRunner learning runs', () => {
  it('a tracer that cannot run here: the run says nothing was observed, instead of an empty record', async () => {
    const { capability, root } = await makeCapability('seen', 'cat "$CAPSULE_PROJECT_DIR/in.txt"\n');
    await writeFile(path.join(root, 'in.txt'), 'x\n');
    const traced = new ShellRunner({ projectRoot: root });
    const blind = new ShellRunner({ projectRoot: root, tracer: '/nonexistent/strace' });
    try {
      // Control: the real tracer sees the file read.
      const seen = await traced.run({ capability, input: '{}', learn: true }, permitFor(capability));
      expect(seen.observed?.observations).toContainEqual(
        expect.objectContaining({ op: 'read', path: path.join(root, 'in.txt'), via: 'tracer' }),
      );
      expect(seen.observed?.unobserved.some((u) => u.startsWith('nothing'))).toBe(false);
      const unseen = await blind
        .run({ capability, input: '{}', learn: true }, permitFor(capability))
        .catch((err: Error) => err);
      // Confined, the tracer fails inside the confinement and leaves no record; unconfined, it cannot start.
      if (unseen instanceof Error) expect(unseen.message).toContain('/nonexistent/strace');
      else {
        expect(unseen.observed?.observations).toEqual([]);
        expect(unseen.observed?.unobserved[0]).toMatch(
          /^nothing: the tracer \(\/nonexistent\/strace\) left no record/,
        );
      }
    } finally {
      await traced.close();
      await blind.close();
    }
  });
});
