import { existsSync } from 'node:fs';
import { mkdir, readdir } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import { makeCapability, tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI, commandKey } from '../../helpers/cli.js';
import { eventually } from '../../helpers/eventually.js';
import { pastSleepOf } from '../../helpers/processes.js';
import { connectCapsule, type McpHarness } from '../mcp/mcp-client.js';
import { permitFor } from '../../helpers/permit.js';

/**
 * A stop is a stop: once capsule decides a run is over (deadline, cancel, output cap, SIGINT/SIGTERM/SIGKILL
 * of capsule), no further command of the run's script runs. Each script below would create `after` two
 * seconds in: it must never appear, waited until a witness started after the stop has slept as long.
 */

const LATER_S = 2;
// `$M` is the marker folder; each script first says it started.
const SCRIPTS: Record<string, string> = {
  'the next command': `touch "$M/started"; sleep ${LATER_S}; touch "$M/after"`,
  'a script that ignores TERM and INT': `trap "" TERM INT; touch "$M/started"; sleep ${LATER_S}; touch "$M/after"`,
  'a forked watcher': `( sleep ${LATER_S}; touch "$M/after" ) & touch "$M/started"; sleep 30`,
  'a watcher in its own session': `setsid sh -c 'sleep ${LATER_S}; touch "$0/after"' "$M" & touch "$M/started"; sleep 30`,
};

async function markers(): Promise<string> {
  const { root } = await tempProject('capsule-stop-');
  const dir = path.join(root, 'markers');
  await mkdir(dir);
  return dir;
}

async function neverAfter(dir: string): Promise<void> {
  await pastSleepOf(LATER_S);
  expect(existsSync(path.join(dir, 'after'))).toBe(false);
}

const runner = new ShellRunner();
afterAll(() => runner.close());

describe('a stop is a stop: shell capabilities', () => {
  for (const [what, script] of Object.entries(SCRIPTS)) {
    it(`at the deadline: ${what} never runs`, async () => {
      const M = await markers();
      const { capability } = await makeCapability('stop', `M=${JSON.stringify(M)}\n${script}\n`, {
        limits: { timeoutMs: 600 },
      });
      const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
      expect(r.timedOut).toBe(true);
      expect(existsSync(path.join(M, 'started'))).toBe(true);
      await neverAfter(M);
    });

    it(`on cancel: ${what} never runs`, async () => {
      const M = await markers();
      const { capability } = await makeCapability('stop', `M=${JSON.stringify(M)}\n${script}\n`);
      const abort = new AbortController();
      const run = runner.run({ capability, input: '{}', signal: abort.signal }, permitFor(capability));
      await eventually(() => existsSync(path.join(M, 'started')), 'the script to start');
      abort.abort();
      expect((await run).canceled).toBe(true);
      await neverAfter(M);
    });
  }

  it('at the output cap: the next command never runs', async () => {
    const M = await markers();
    const { capability } = await makeCapability(
      'flood',
      `M=${JSON.stringify(M)}\ntouch "$M/started"; head -c 200000 /dev/zero; sleep ${LATER_S}; touch "$M/after"\n`,
      { limits: { outputBytes: 4096 } },
    );
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.truncated).toBe(true);
    await neverAfter(M);
  });

  it('a busy writer writes nothing once the run is over (frozen, then killed)', async () => {
    const M = await markers();
    const { capability } = await makeCapability(
      'writer',
      `M=${JSON.stringify(M)}\nn=0; while :; do n=$((n+1)); : > "$M/w$n"; done\n`,
      { limits: { timeoutMs: 500 } },
    );
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.timedOut).toBe(true);
    const at = (await readdir(M)).length;
    expect(at).toBeGreaterThan(0);
    await pastSleepOf(0.5);
    expect((await readdir(M)).length).toBe(at);
  });
});

/** `capsule exec` of a script, granted by the exact key capsule gives it (`capsule key`). */
async function exec(M: string, script: string, extra: string[] = []) {
  // Single quotes: the outer bash of run_command leaves `$M` to the script.
  const command = `sh -c 'M=${M}; ${script}'`;
  const key = await commandKey(command);
  // Wrapped: an async function returning the child bare would wait for its exit (it is a thenable).
  return {
    child: execa(
      process.execPath,
      [BUILT_CLI, 'exec', '--grant', key, '--no-prompt', ...extra, '--', command],
      {
        cwd: path.dirname(M),
        reject: false,
      },
    ),
  };
}

describe('a stop is a stop: capsule exec and capsule run', () => {
  const plain = `touch "$M/started"; sleep ${LATER_S}; touch "$M/after"`;
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGKILL'] as const) {
    it(`capsule exec stopped by ${signal}: the next command never runs`, async () => {
      const M = await markers();
      const { child } = await exec(M, plain);
      await eventually(() => existsSync(path.join(M, 'started')), 'the command to start');
      child.kill(signal);
      const r = await child;
      if (signal !== 'SIGKILL') expect(r.exitCode).toBe(130);
      await neverAfter(M);
    });
  }

  it('capsule exec at its --timeout-ms: the next command never runs', async () => {
    const M = await markers();
    const r = await (await exec(M, plain, ['--timeout-ms', '700'])).child;
    expect(r.exitCode).toBe(124);
    expect(existsSync(path.join(M, 'started'))).toBe(true);
    await neverAfter(M);
  });

  for (const signal of ['SIGINT', 'SIGTERM', 'SIGKILL'] as const) {
    it(`capsule run of a shell capability stopped by ${signal}: the next command never runs`, async () => {
      const M = await markers();
      const root = path.dirname(M);
      await writeCapability(
        path.join(root, 'capabilities'),
        'later',
        { grants: { env: ['M'] } },
        {
          'run.sh': `${plain}\n`,
        },
      );
      const child = execa(
        process.execPath,
        [BUILT_CLI, 'run', 'later', '--grant', 'run_capability:later', '--no-prompt'],
        { cwd: root, reject: false, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', M } },
      );
      await eventually(() => existsSync(path.join(M, 'started')), 'the capability to start');
      child.kill(signal);
      const r = await child;
      if (signal !== 'SIGKILL') expect(r.exitCode).toBe(130);
      await neverAfter(M);
    });
  }
});

describe('a stop is a stop: run_command over MCP', () => {
  let h: McpHarness | undefined;
  afterAll(async () => h?.close());

  it('a cancelled run_command runs no further command', async () => {
    const M = await markers();
    const command = `sh -c 'M=${M}; ${SCRIPTS['the next command']}'`;
    const key = await commandKey(command);
    h = await connectCapsule({ cwd: path.dirname(M), args: ['--grant', key] });
    const ac = new AbortController();
    const pending = h.client.callTool({ name: 'run_command', arguments: { command } }, undefined, {
      signal: ac.signal,
    });
    // Judged below; if the test fails first, the close in afterAll must not leave the rejection unhandled.
    void pending.catch(() => undefined);
    await eventually(() => existsSync(path.join(M, 'started')), 'the command to start');
    ac.abort();
    await expect(pending).rejects.toThrow();
    await neverAfter(M);
    // The server still answers.
    expect((await h.client.listTools()).tools.length).toBeGreaterThan(0);
  });
});
