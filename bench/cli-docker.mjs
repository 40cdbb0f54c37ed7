// A CI job calling the CLI once per docker capability: `capsule run hello-docker` as a whole process (the built
// dist/cli/main.js, a new process per call) against a bare `docker run --rm -i` of the same image, with the same
// hardening flags, the same script and the same input, on the same engine, round-robin in one run.
// Rows: the default engine (DOCKER_HOST, not probed), one configured engine (measured: its posture kept in the
// per-user state after the first process), a pool of two configured engines, the swarm. Needs the extra engines
// (bash scripts/extra-engines.sh up); without them the suite says so and adds no rows.
import { spawnSync } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { stats } from './stats.mjs';

const FLOOR = 'cli-docker: bare docker run --rm -i (same image, flags, script, input)';

export async function benchCliDocker({ root, iterations = 10 }) {
  const enginesRoot = process.env.CAPSULE_ENGINES_ROOT ?? '/var/lib/capsule-engines';
  let index;
  try {
    index = JSON.parse(await readFile(path.join(enginesRoot, 'engines.json'), 'utf8'));
  } catch {
    process.stderr.write('bench: cli-docker skipped (no extra engines: bash scripts/extra-engines.sh up)\n');
    return [];
  }
  const hostA = index.engines['pool-a'].host;
  const hostB = index.engines['pool-b'].host;
  const swarm = index.engines['swarm-m']?.host;
  const main = path.join(root, 'dist', 'cli', 'main.js');
  const home = await mkdtemp(path.join(os.tmpdir(), 'capsule-bench-cli-docker-'));
  const project = path.join(home, 'project');
  const capDir = path.join(project, 'capabilities', 'hello-docker');
  await cp(path.join(root, 'capabilities', 'hello-docker'), capDir, { recursive: true });
  await writeFile(path.join(project, 'capsule.json'), '{}\n');
  const input = '{"name":"bench"}';
  const base = {
    ...process.env,
    XDG_CACHE_HOME: path.join(home, 'cache'),
    XDG_STATE_HOME: path.join(home, 'state'),
  };
  delete base.CAPSULE_ENGINES;
  delete base.CAPSULE_ENGINE;
  const manifest = JSON.parse(await readFile(path.join(capDir, 'capability.json'), 'utf8'));
  const limits = manifest.limits;
  const bare = [
    'docker',
    [
      '-H',
      hostA,
      'run',
      '--rm',
      '-i',
      '--network',
      'none',
      '--read-only',
      '--cap-drop',
      'ALL',
      '--security-opt',
      'no-new-privileges',
      '--user',
      '65534:65534',
      '--memory',
      `${limits.memoryMb}m`,
      '--memory-swap',
      `${limits.memoryMb}m`,
      '--pids-limit',
      String(limits.pids),
      '--tmpfs',
      '/tmp:rw,noexec,nosuid,nodev,size=16m,mode=1777',
      '--log-driver',
      'none',
      '-v',
      `${capDir}:/capability:ro`,
      '-w',
      '/capability',
      'capsule/busybox:1',
      '/bin/sh',
      '/capability/hello.sh',
    ],
    base,
  ];
  const run = (engines, extra = {}) => [
    process.execPath,
    [main, 'run', 'hello-docker', '--grant', 'run_capability:hello-docker', '--input', input],
    { ...base, ...extra, ...(engines === undefined ? {} : { CAPSULE_ENGINES: JSON.stringify(engines) }) },
  ];
  const cases = [
    [FLOOR, bare],
    [
      'cli-docker: capsule run hello-docker, default engine (DOCKER_HOST)',
      run(undefined, { DOCKER_HOST: hostA }),
    ],
    [
      'cli-docker: capsule run hello-docker, one configured engine (posture kept)',
      run({ a: { type: 'docker', host: hostA } }),
    ],
    [
      'cli-docker: capsule run hello-docker, a pool of two engines',
      run({ a: { type: 'docker', host: hostA }, b: { type: 'docker', host: hostB } }),
    ],
  ];
  const swarmCases =
    swarm === undefined
      ? []
      : [['cli-docker: capsule run hello-docker, the swarm', run({ s: { type: 'swarm', manager: swarm } })]];
  const spawn = ([cmd, args, env]) => {
    const t = performance.now();
    const r = spawnSync(cmd, args, { cwd: project, env, input, encoding: 'utf8' });
    const ms = performance.now() - t;
    if (r.status !== 0 || !r.stdout.includes('hello'))
      throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}: ${r.stdout} ${r.stderr}`);
    return ms;
  };
  try {
    const all = [...cases, ...swarmCases];
    for (const [, c] of all) spawn(c);
    const samples = new Map(all.map(([name]) => [name, []]));
    for (let i = 0; i < iterations; i++) {
      for (const [name, c] of cases) samples.get(name).push(spawn(c));
      // The swarm is slow (a service per call): fewer rounds.
      if (i % 2 === 0) for (const [name, c] of swarmCases) samples.get(name).push(spawn(c));
    }
    return all.map(([name]) =>
      name === FLOOR
        ? { name, isFloor: true, ...stats(samples.get(name)) }
        : { name, floor: FLOOR, ...stats(samples.get(name)) },
    );
  } finally {
    await rm(home, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rows = await benchCliDocker({ root, iterations: Number(process.env.ITER ?? 10) });
  const floor = rows.find((r) => r.isFloor)?.median;
  for (const r of rows)
    process.stdout.write(
      `${r.name.padEnd(80)} ${r.median.toFixed(0).padStart(6)} ms  ${(r.median / floor).toFixed(2)}×\n`,
    );
}
