// Shell runner overhead: capsule's path (registry lookup + gate + input validation + ShellRunner, with
// the confinement this machine allows: bubblewrap namespaces, read-only state, the syscall filter, cgroup
// limits) and the confined spawn alone, layer by layer, vs a bare execa spawn of the same script, in one
// process, measured alternately so noise hits all of them; and the cost of a stop (from the decision to the
// last process of the run gone).
import { execa } from 'execa';
import { stats } from './stats.mjs';

export async function benchShell({ root, iterations = 50 }) {
  const { Registry } = await import('../dist/registry/registry.js');
  const { ShellRunner } = await import('../dist/runners/shell-runner.js');
  const { Executor } = await import('../dist/executor/executor.js');
  const { HostProcesses } = await import('../dist/runners/host/host-processes.js');
  const { describeConfinement } = await import('../dist/runners/host/confinement.js');
  const { protectedPaths } = await import('../dist/project/protected-state.js');
  const processes = new HostProcesses(undefined, { prestart: true });
  const confinement = processes.confinement();
  process.stderr.write(`bench: shell confinement here: ${describeConfinement(confinement)}\n`);
  const { PermissionEngine } = await import('../dist/permissions/engine.js');
  const { createNonInteractivePrompter } = await import('../dist/permissions/prompter.js');
  const registry = new Registry({ roots: ['capabilities'], projectRoot: root });
  const executor = new Executor({
    registry,
    // The real gate; audit off so the bench leaves no log in the repo (its cost is measured in the permissions suite).
    gate: await PermissionEngine.create({
      projectRoot: root,
      sessionGrants: ['run_capability:shout'],
      prompter: createNonInteractivePrompter(),
      audit: false,
    }),
    runners: [new ShellRunner({ projectRoot: root, hostProcesses: processes })],
  });
  const cap = await registry.get('shout');
  const bare = [];
  const confined = [];
  const ours = [];
  for (let i = 0; i < iterations + 5; i++) {
    let t = performance.now();
    await execa('sh', [cap.entryPath], {
      cwd: cap.dir,
      input: '{"a":"b"}',
      extendEnv: false,
      env: { PATH: '/usr/bin:/bin' },
    });
    const b = performance.now() - t;
    t = performance.now();
    const direct = await confinedShout(processes, cap, { readOnly: protectedPaths(root).all, hidden: [] });
    const c = performance.now() - t;
    if (direct.exitCode !== 0) throw new Error(`confined shout failed: ${direct.stderr}`);
    t = performance.now();
    const { result } = await executor.run('shout', { a: 'b' });
    const o = performance.now() - t;
    if (result.exitCode !== 0) throw new Error(`shout failed: ${result.stderr}`);
    if (i >= 5) {
      bare.push(b);
      confined.push(c);
      ours.push(o);
    }
  }
  // Calls spaced out, as an agent's are (it reads one result before it asks for the next): the same three
  // paths with the machine idle for a moment before each, so capsule's next confined init (prestarted
  // after each call) is ready, as the docker runner's next container is in its spaced-out row.
  const spacedBare = [];
  const spacedOurs = [];
  const pause = () => new Promise((r) => setTimeout(r, 40));
  for (let i = 0; i < Math.ceil(iterations / 2); i++) {
    await pause();
    let t = performance.now();
    await execa('sh', [cap.entryPath], {
      cwd: cap.dir,
      input: '{"a":"b"}',
      extendEnv: false,
      env: { PATH: '/usr/bin:/bin' },
    });
    spacedBare.push(performance.now() - t);
    await pause();
    t = performance.now();
    const { result } = await executor.run('shout', { a: 'b' });
    spacedOurs.push(performance.now() - t);
    if (result.exitCode !== 0) throw new Error(`shout failed: ${result.stderr}`);
  }
  process.stderr.write(
    `bench: shell calls that found their confined init prestarted: ${processes.prestartedRuns}\n`,
  );
  await executor.close();
  const layerRows = confinement.pidNamespace
    ? await layers({ root, cap, confinement, HostProcesses, protectedPaths, iterations })
    : [];
  return [
    ...layerRows,
    { name: 'shell: bare execa spawn, calls spaced out', isFloor: true, ...stats(spacedBare) },
    {
      name: 'shell: capsule run, calls spaced out (prestarted init)',
      ...stats(spacedOurs),
      floor: 'shell: bare execa spawn, calls spaced out',
    },
    { name: 'shell: bare execa spawn', isFloor: true, ...stats(bare) },
    {
      name: `shell: confined spawn (${confinement.pidNamespace ? 'pid ns + ro state + cgroup' : 'unconfined here'})`,
      ...stats(confined),
      floor: 'shell: bare execa spawn',
    },
    {
      name: 'shell: capsule run (lookup+gate+validate+run)',
      ...stats(ours),
      floor: 'shell: bare execa spawn',
    },
  ];
}

/**
 * What each layer of the host confinement costs (fresh starts, no prestarted init): bubblewrap's namespaces
 * alone, then with capsule's state protected, then with the syscall filter, then with the run's cgroup (the
 * whole confinement); and a stop: from the decision (abort) to the last process of the run gone.
 */
async function layers({ root, cap, confinement, HostProcesses, protectedPaths, iterations }) {
  const protection = { readOnly: protectedPaths(root).all, hidden: [] };
  const none = { readOnly: [], hidden: [] };
  const variants = [
    [
      'shell layers: bwrap namespaces only',
      { ...confinement, syscallFilter: false, cgroup: undefined },
      none,
    ],
    [
      'shell layers: + protected state',
      { ...confinement, syscallFilter: false, cgroup: undefined },
      protection,
    ],
    ['shell layers: + syscall filter', { ...confinement, cgroup: undefined }, protection],
    ['shell layers: + cgroup (all of it)', confinement, protection],
  ].map(([name, conf, prot]) => ({ name, processes: new HostProcesses(conf), prot, times: [] }));
  const bare = [];
  for (let i = 0; i < iterations + 5; i++) {
    let t = performance.now();
    await execa('sh', [cap.entryPath], {
      cwd: cap.dir,
      input: '{"a":"b"}',
      extendEnv: false,
      env: { PATH: '/usr/bin:/bin' },
    });
    if (i >= 5) bare.push(performance.now() - t);
    for (const v of variants) {
      t = performance.now();
      const r = await confinedShout(v.processes, cap, v.prot);
      if (r.exitCode !== 0) throw new Error(`${v.name}: ${r.stderr}`);
      if (i >= 5) v.times.push(performance.now() - t);
    }
  }
  // The stop: a run that would go on (a busy loop and a sleeping child) is aborted once it runs.
  const stops = [];
  const full = variants[variants.length - 1].processes;
  for (let i = 0; i < Math.ceil(iterations / 2); i++) {
    const abort = new AbortController();
    const run = full.run({
      file: 'sh',
      args: ['-c', 'sleep 30 & echo up; while :; do :; done'],
      cwd: cap.dir,
      env: { PATH: '/usr/bin:/bin' },
      output: 'capture',
      outputBytes: 65536,
      signal: abort.signal,
      memoryBytes: 64 * 1024 * 1024,
      pids: 16,
    });
    await new Promise((r) => setTimeout(r, 30));
    const t = performance.now();
    abort.abort();
    const r = await run;
    stops.push(performance.now() - t);
    if (!r.canceled) throw new Error('the stop bench run was not canceled');
  }
  return [
    { name: 'shell layers: bare execa spawn', isFloor: true, ...stats(bare) },
    ...variants.map((v) => ({ name: v.name, ...stats(v.times), floor: 'shell layers: bare execa spawn' })),
    { name: `shell: a stop, decision to last process gone (${confinement.stop})`, ...stats(stops) },
  ];
}

/** The shout capability's script through a HostProcesses, with the manifest's limits. */
function confinedShout(processes, cap, protection) {
  return processes.run({
    file: 'sh',
    args: [cap.entryPath],
    cwd: cap.dir,
    env: { PATH: '/usr/bin:/bin' },
    input: '{"a":"b"}',
    output: 'capture',
    outputBytes: cap.manifest.limits.outputBytes,
    timeoutMs: cap.manifest.limits.timeoutMs,
    protection,
    memoryBytes: cap.manifest.limits.memoryMb * 1024 * 1024,
    pids: cap.manifest.limits.pids,
  });
}
