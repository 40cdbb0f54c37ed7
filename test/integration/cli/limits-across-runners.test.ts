import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { execa } from 'execa';
import { builtCli, BUILT_CLI } from '../../helpers/cli.js';
import { eventually } from '../../helpers/eventually.js';
import { processesWith, survivors } from '../../helpers/processes.js';
import { assemble } from '../runners/wasm/helpers.js';

// The same limit hit gives the same `capsule run --json` field and the same exit code, whichever runner ran
// it (docs/cli.md "Limits"). Each row is a real run of the built CLI: a shell process in its cgroup, a Wasm
// guest in a worker, a container on the Docker engine.

type Limit = 'output' | 'memory' | 'timeout';
type Env = 'shell' | 'wasm' | 'docker';

/** What each limit must look like, whoever enforced it. */
const EXPECTED: Record<Limit, { field: 'truncated' | 'oomKilled' | 'timedOut'; code: number }> = {
  output: { field: 'truncated', code: 137 },
  memory: { field: 'oomKilled', code: 137 },
  timeout: { field: 'timedOut', code: 124 },
};

const LIMITS = { output: { outputBytes: 4096 }, memory: { memoryMb: 48 }, timeout: { timeoutMs: 1500 } };

const SHELL: Record<Limit, string> = {
  output: 'yes capsule\n',
  memory: `node -e 'const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1))'\n`,
  timeout: 'while :; do :; done\n',
};
// busybox: dd's 512 MiB block buffer is more than the cgroup allows.
const DOCKER: Record<Limit, string> = {
  output: 'yes capsule\n',
  memory: 'exec dd if=/dev/zero of=/dev/null bs=512M count=1\n',
  timeout: 'while :; do :; done\n',
};
// fixtures/wasm/probe.wat commands.
const WASM: Record<Limit, string> = { output: 'oflood', memory: 'malloc', timeout: 'ispin' };

let root: string;

/** A word in the command line of a cancel row's sleeping process: the host sees when it runs and when it is gone. */
const token = (env: string): string => `capsule-cancel-${env}-${process.pid}`;

function capName(env: Env, limit: Limit): string {
  return `${env}-${limit}`;
}

beforeAll(async () => {
  const project = await tempProject('capsule-limits-');
  root = project.root;
  await writeFile(path.join(root, 'capsule.json'), '{}\n');
  const probe = assemble('probe.wat');
  for (const env of ['shell', 'docker'] as const) {
    const script = `sh -c 'sleep 60; :' ${token(env)}\n`;
    const docker = env === 'docker' ? { environment: 'docker', docker: { image: 'capsule/busybox:1' } } : {};
    await writeCapability(
      project.capRoot,
      `${env}-cancel`,
      { ...docker, limits: { timeoutMs: 120_000 } },
      { 'run.sh': script },
    );
  }
  for (const limit of Object.keys(EXPECTED) as Limit[]) {
    const limits = { timeoutMs: 30_000, ...LIMITS[limit] };
    await writeCapability(project.capRoot, capName('shell', limit), { limits }, { 'run.sh': SHELL[limit] });
    await writeCapability(
      project.capRoot,
      capName('docker', limit),
      { environment: 'docker', docker: { image: 'capsule/busybox:1' }, limits },
      { 'run.sh': DOCKER[limit] },
    );
    const wasmName = capName('wasm', limit);
    await writeCapability(
      project.capRoot,
      wasmName,
      { environment: 'wasm', entry: 'probe.wasm', interpreter: undefined, args: [WASM[limit]], limits },
      {},
    );
    await writeFile(path.join(project.capRoot, wasmName, 'probe.wasm'), probe);
  }
});

const ROWS: [Env, Limit][] = (['shell', 'wasm', 'docker'] as Env[]).flatMap((env) =>
  (['output', 'memory', 'timeout'] as Limit[]).map((limit): [Env, Limit] => [env, limit]),
);

describe('capsule run: one limit, one field, one exit code in every runner', () => {
  it.each(ROWS)('%s: the %s limit', async (env, limit) => {
    const name = capName(env, limit);
    const r = await builtCli(['run', name, '--json', '--no-prompt', '--grant', `run_capability:${name}`], {
      cwd: root,
    });
    const { field, code } = EXPECTED[limit];
    expect(r.stderr).not.toMatch(/internal error/);
    const doc = JSON.parse(r.stdout) as { result: Record<string, unknown> };
    const flags = { truncated: false, oomKilled: false, timedOut: false, canceled: false, [field]: true };
    expect(doc.result).toMatchObject({ environment: env, ...flags });
    expect(r.code).toBe(code);
  });
});

describe('capsule run: Ctrl-C is canceled: true and exit 130 in every runner that has a process to see', () => {
  it.each(['shell', 'docker'])('%s', async (env) => {
    const name = `${env}-cancel`;
    const child = execa(
      'node',
      [BUILT_CLI, 'run', name, '--json', '--no-prompt', '--grant', `run_capability:${name}`],
      {
        cwd: root,
        reject: false,
      },
    );
    // Interrupt once the capability really runs, as a person would, not after a guessed delay.
    await eventually(() => processesWith(token(env)).length > 0, `${name} to be running`);
    child.kill('SIGINT');
    const r = await child;
    const doc = JSON.parse(r.stdout) as { result: Record<string, unknown> };
    expect(doc.result).toMatchObject({
      environment: env,
      canceled: true,
      timedOut: false,
      truncated: false,
      oomKilled: false,
    });
    expect(r.exitCode).toBe(130);
    expect(await survivors(token(env))).toEqual([]);
  });
});
