import { chmod, mkdir, readdir, writeFile } from 'node:fs/promises';
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

type Limit = 'output' | 'memory' | 'timeout' | 'pids';
type Env = 'shell' | 'wasm' | 'docker';

/** What each limit must look like, whoever enforced it. */
const EXPECTED: Record<
  Limit,
  { field: 'truncated' | 'oomKilled' | 'timedOut' | 'pidsLimited'; code: number }
> = {
  output: { field: 'truncated', code: 137 },
  memory: { field: 'oomKilled', code: 137 },
  timeout: { field: 'timedOut', code: 124 },
  pids: { field: 'pidsLimited', code: 137 },
};

const PIDS = 8;
const LIMITS = {
  output: { outputBytes: 4096 },
  memory: { memoryMb: 48 },
  timeout: { timeoutMs: 1500 },
  pids: { pids: PIDS },
};

/**
 * A fork bomb of 40 sleepers, each leaving a file named after its pid in a granted folder as it starts:
 * the files are the processes that really ran. `$1` is where the folder is for the runner.
 */
const forkBomb = (dir: string, sleep = 5): string =>
  `for i in $(seq 1 40); do sh -c 'echo > "${dir}/$$"; sleep ${sleep}' & done\nwait\n`;
/** The granted folder of each runner's pids row (relative to the project root). */
const startedDir = (env: Env): string => `started-${env}`;

const SHELL: Record<Limit, string> = {
  output: 'yes capsule\n',
  memory: `node -e 'const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1))'\n`,
  timeout: 'while :; do :; done\n',
  pids: forkBomb(startedDir('shell')),
};
// busybox: dd's 512 MiB block buffer is more than the cgroup allows.
const DOCKER: Record<Limit, string> = {
  output: 'yes capsule\n',
  memory: 'exec dd if=/dev/zero of=/dev/null bs=512M count=1\n',
  timeout: 'while :; do :; done\n',
  // Granted folders are mounted at the same place under /project.
  pids: forkBomb(`/project/${startedDir('docker')}`),
};
// fixtures/wasm/probe.wat commands (a Wasm guest cannot start processes: no pids row).
const WASM: Record<Exclude<Limit, 'pids'>, string> = { output: 'oflood', memory: 'malloc', timeout: 'ispin' };

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
  for (const env of ['shell', 'docker'] as const) {
    // The container's user (nobody) writes there too.
    await mkdir(path.join(root, startedDir(env)), { mode: 0o777 });
    await chmod(path.join(root, startedDir(env)), 0o777);
  }
  for (const limit of Object.keys(EXPECTED) as Limit[]) {
    const limits = { timeoutMs: 30_000, ...LIMITS[limit] };
    const grants = (env: Env): Record<string, unknown> =>
      limit === 'pids' ? { grants: { fs: [{ path: startedDir(env), mode: 'rw' }] } } : {};
    await writeCapability(
      project.capRoot,
      capName('shell', limit),
      { limits, ...grants('shell') },
      { 'run.sh': limit === 'pids' ? `cd "$CAPSULE_PROJECT_DIR" && ${SHELL[limit]}` : SHELL[limit] },
    );
    await writeCapability(
      project.capRoot,
      capName('docker', limit),
      { environment: 'docker', docker: { image: 'capsule/busybox:1' }, limits, ...grants('docker') },
      { 'run.sh': DOCKER[limit] },
    );
    if (limit === 'pids') continue;
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
  (['output', 'memory', 'timeout', 'pids'] as Limit[])
    .filter((limit) => env !== 'wasm' || limit !== 'pids')
    .map((limit): [Env, Limit] => [env, limit]),
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
    if (limit === 'pids') {
      // By effect: fewer sleepers ran than the limit allows processes (the rest were never started; the
      // control below shows all 40 leave their file when the limit lets them).
      const started = await readdir(path.join(root, startedDir(env as 'shell' | 'docker')));
      expect(started.length).toBeLessThan(PIDS);
    }
  });
});

describe('capsule run: the pids limit in a reset-reusable container (calls by exec into one container)', () => {
  it('is reported the same: pidsLimited, 137, and fewer sleepers ran than the limit', async () => {
    const dir = 'started-docker-reusable';
    const name = 'docker-pids-reusable';
    await mkdir(path.join(root, dir));
    await chmod(path.join(root, dir), 0o777);
    await writeCapability(
      path.join(root, 'capabilities'),
      name,
      {
        environment: 'docker',
        docker: { image: 'capsule/busybox:1', reusable: true },
        limits: { timeoutMs: 30_000, pids: PIDS },
        grants: { fs: [{ path: dir, mode: 'rw' }] },
      },
      { 'run.sh': forkBomb(`/project/${dir}`) },
    );
    const r = await builtCli(['run', name, '--json', '--no-prompt', '--grant', `run_capability:${name}`], {
      cwd: root,
    });
    const doc = JSON.parse(r.stdout) as { result: Record<string, unknown> };
    expect(doc.result).toMatchObject({ environment: 'docker', pidsLimited: true, timedOut: false });
    expect(r.code).toBe(137);
    expect((await readdir(path.join(root, dir))).length).toBeLessThan(PIDS);
  });
});

describe('capsule run: the pids row, with a limit the same processes fit in', () => {
  // The control of the pids rows: the same bomb leaves a file for every sleeper when the limit allows them all
  // (256: on the host each sleeper is two processes, sh and sleep),
  // so fewer files above is the limit at work, and the report comes with the hit, not with the bomb.
  it.each(['shell', 'docker'] as const)(
    '%s: all 40 sleepers start, nothing is reported, exit 0',
    async (env) => {
      const dir = `started-${env}-fits`;
      const name = `${env}-pids-fits`;
      await mkdir(path.join(root, dir));
      await chmod(path.join(root, dir), 0o777);
      const docker =
        env === 'docker' ? { environment: 'docker', docker: { image: 'capsule/busybox:1' } } : {};
      await writeCapability(
        path.join(root, 'capabilities'),
        name,
        { ...docker, limits: { timeoutMs: 30_000, pids: 256 }, grants: { fs: [{ path: dir, mode: 'rw' }] } },
        {
          'run.sh':
            env === 'docker'
              ? forkBomb(`/project/${dir}`, 0.2)
              : `cd "$CAPSULE_PROJECT_DIR" && ${forkBomb(dir, 0.2)}`,
        },
      );
      const r = await builtCli(['run', name, '--json', '--no-prompt', '--grant', `run_capability:${name}`], {
        cwd: root,
      });
      const doc = JSON.parse(r.stdout) as { result: Record<string, unknown> };
      expect(doc.result.pidsLimited).not.toBe(true);
      expect(r.code).toBe(0);
      expect((await readdir(path.join(root, dir))).length).toBe(40);
    },
  );
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
