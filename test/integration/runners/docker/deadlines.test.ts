import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, copyFile, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import { tempProject, writeCapability } from '../../../helpers/capability.js';
import { BUILT_CLI } from '../../../helpers/cli.js';
import { choose, connectCapsule, textOf, type McpHarness } from '../../mcp/mcp-client.js';
import { dockerForTests, tempCapability } from './helpers.js';
import { holdsWithin } from '../../../helpers/eventually.js';
import { permitFor } from '../../../helpers/permit.js';

// A capsule process that dies without cleaning up (SIGKILL) or hangs with its engine connection open
// (SIGSTOP) must not leave a container running past its own deadline: every container carries it inside.
// These drive the built CLI and runner (npm run build first).

const here = path.dirname(fileURLToPath(import.meta.url));

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

describe('docker containers carry their own deadline', () => {
  let engine: DockerodeEngine;
  const children: ChildProcess[] = [];
  const harnesses: McpHarness[] = [];
  const suffix = `${process.pid}-${Date.now()}`;

  beforeAll(async () => {
    if (!existsSync(BUILT_CLI)) throw new Error(`${BUILT_CLI} is missing: run "npm run build" first`);
    ({ engine } = await dockerForTests());
  });

  afterAll(async () => {
    for (const c of children) {
      if (c.exitCode === null && c.signalCode === null) {
        c.kill('SIGCONT');
        c.kill('SIGKILL');
      }
    }
    for (const h of harnesses) await h.close().catch(() => {});
    // Whatever a failing test left behind.
    for (const c of children) {
      for (const left of await engine.listContainers([`capsule.pid=${c.pid}`]))
        await engine.remove(left.id).catch(() => {});
    }
  });

  const runningOf = async (pid: number | undefined | null): Promise<number> =>
    (await engine.listContainers([`capsule.pid=${pid}`])).filter((c) => c.state === 'running').length;

  /** A project holding one docker capability that never finishes on its own, with a short budget. */
  async function foreverProject(name: string, timeoutMs: number): Promise<string> {
    const { root, capRoot } = await tempProject('capsule-deadline-');
    await writeCapability(
      capRoot,
      name,
      { environment: 'docker', docker: { image: 'capsule/busybox:1' }, limits: { timeoutMs } },
      // Ignores TERM and HUP, and leaves a detached grandchild: everything must go with the deadline.
      {
        'run.sh':
          "trap '' TERM HUP INT\n(trap '' TERM HUP; while :; do sleep 1; done) &\necho started\nwhile :; do sleep 1; done\n",
      },
    );
    return root;
  }

  function runCli(root: string, name: string): ChildProcess {
    const child = spawn(process.execPath, [BUILT_CLI, 'run', name, '--grant', `run_capability:${name}`], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    return child;
  }

  it('capsule run SIGKILLed mid-call: its container does not outlive the capability budget', async () => {
    const name = `forever-kill-${suffix}`;
    const root = await foreverProject(name, 3000);
    const child = runCli(root, name);
    expect(await holdsWithin(async () => (await runningOf(child.pid)) >= 1, 60_000)).toBe(true);
    child.kill('SIGKILL');
    await exited(child);
    // Budget 3 s from the call's start; the bound only keeps a failing test from hanging.
    expect(await holdsWithin(async () => (await runningOf(child.pid)) === 0, 20_000)).toBe(true);
  });

  it('capsule run hung (SIGSTOP, engine connection still open) mid-call: the container still stops at its deadline', async () => {
    const name = `forever-stop-${suffix}`;
    const root = await foreverProject(name, 3000);
    const child = runCli(root, name);
    // Stopped once the script itself runs (see hungMidCall): a container started ahead may still wait for its go line.
    expect(await holdsWithin(async () => scriptRunning(name, 'run.sh'), 60_000)).toBe(true);
    child.kill('SIGSTOP');
    // A stopped process is alive: no reaper removes its containers, only their own deadline can end them.
    expect(await holdsWithin(async () => (await runningOf(child.pid)) === 0, 20_000)).toBe(true);
    child.kill('SIGKILL');
    child.kill('SIGCONT');
    await exited(child);
  });

  it('capsule mcp SIGKILLed while a prestarted container waits for its call: the parked container goes', async () => {
    const { root, capRoot } = await tempProject('capsule-deadline-mcp-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const name = `parked-${suffix}`;
    await writeCapability(
      capRoot,
      name,
      {
        environment: 'docker',
        docker: { image: 'capsule/busybox:1' },
        limits: { timeoutMs: 3000 },
      },
      { 'run.sh': 'cat\n' },
    );
    const h = await connectCapsule({ cwd: root, answer: () => choose('AlwaysThisSession') });
    harnesses.push(h);
    // From a configuration's second call on, the next call's container is prestarted and parked.
    for (let i = 0; i < 2; i++) {
      const r = await h.client.callTool(
        { name: 'run_capability', arguments: { name, input: { i } } },
        undefined,
        { timeout: 120_000 },
      );
      expect(textOf(r)).toBe(`{"i":${i}}`);
    }
    const pid = h.pid;
    expect(await holdsWithin(async () => (await runningOf(pid)) >= 1, 30_000)).toBe(true);
    if (pid === null) throw new Error('no server pid');
    process.kill(pid, 'SIGKILL');
    expect(await holdsWithin(async () => (await runningOf(pid)) === 0, 20_000)).toBe(true);
  });

  it('a runner hung (SIGSTOP) with a parked container: the parked container ends at its idle deadline', async () => {
    const t = await tempCapability('parked-idle', { entry: 'run.sh' }, { 'run.sh': 'cat\n' });
    try {
      const child = spawn(process.execPath, [path.join(here, 'child-parked.mjs'), t.dir, '1500'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      expect(await holdsWithin(async () => (await runningOf(child.pid)) >= 1, 60_000)).toBe(true);
      child.kill('SIGSTOP');
      expect(await holdsWithin(async () => (await runningOf(child.pid)) === 0, 20_000)).toBe(true);
      child.kill('SIGKILL');
      child.kill('SIGCONT');
      await exited(child);
    } finally {
      await t.cleanup();
    }
  });

  it('a reusable (exec) capability: capsule SIGKILLed mid-call leaves no warm container running', async () => {
    const name = `warm-kill-${suffix}`;
    const { root, capRoot } = await tempProject('capsule-deadline-warm-');
    await writeCapability(
      capRoot,
      name,
      {
        environment: 'docker',
        docker: { image: 'capsule/busybox:1', reusable: true },
        limits: { timeoutMs: 3000 },
      },
      { 'run.sh': "trap '' TERM HUP INT\necho started\nwhile :; do sleep 1; done\n" },
    );
    const child = runCli(root, name);
    expect(await holdsWithin(async () => (await runningOf(child.pid)) >= 1, 60_000)).toBe(true);
    child.kill('SIGKILL');
    await exited(child);
    expect(await holdsWithin(async () => (await runningOf(child.pid)) === 0, 20_000)).toBe(true);
  });

  it("an image that is not capsule's (no shell at all): SIGKILLed capsule, the container still ends at its deadline", async () => {
    // An empty image: nothing of capsule's in it, not even /bin/sh.
    const image = 'capsule-test/empty:1';
    await execa('sh', ['-c', `tar -cf - -T /dev/null | docker import - ${image}`]);
    const name = `foreign-${suffix}`;
    const { root, capRoot } = await tempProject('capsule-deadline-foreign-');
    const dir = await writeCapability(capRoot, name, {
      environment: 'docker',
      entry: 'busybox',
      interpreter: undefined,
      args: ['sh', '-c', "trap '' TERM HUP INT; echo started; while :; do /capability/busybox sleep 1; done"],
      docker: { image },
      limits: { timeoutMs: 3000 },
    });
    // The capability brings its own static busybox as its entry.
    await copyFile('/bin/busybox', path.join(dir, 'busybox'));
    await chmod(path.join(dir, 'busybox'), 0o755);
    try {
      const child = runCli(root, name);
      expect(await holdsWithin(async () => (await runningOf(child.pid)) >= 1, 60_000)).toBe(true);
      child.kill('SIGKILL');
      await exited(child);
      expect(await holdsWithin(async () => (await runningOf(child.pid)) === 0, 20_000)).toBe(true);
      // Its stopped container still references the image until a reaper removes it.
      for (const c of await engine.listContainers([`capsule.pid=${child.pid}`])) await engine.remove(c.id);
    } finally {
      await execa('docker', ['rmi', image], { reject: false });
    }
  });

  /** Start `capsule run` on a never-ending capability, stop it (hung, connection open) once it runs. */
  async function hungMidCall(
    name: string,
    manifest: Record<string, unknown>,
    script: string,
    hostVisible = true,
  ): Promise<ChildProcess> {
    const { root, capRoot } = await tempProject('capsule-deadline-hung-');
    await writeCapability(
      capRoot,
      name,
      { environment: 'docker', limits: { timeoutMs: 3000 }, ...manifest },
      {
        'run.sh': script,
      },
    );
    const child = runCli(root, name);
    // Stopped only once the capability's own script runs: a container that is merely running may still wait
    // for its call (a warm container's keep-alive, a started-ahead one's go line), and that wait is bounded by
    // the container's life (minutes), not by the call's deadline this test is about. gVisor's processes are
    // not visible from the host, so there the running container is what can be seen.
    const ready = hostVisible
      ? async () => scriptRunning(name, 'run.sh')
      : async () => scriptRunningInside(child.pid, name, 'run.sh');
    expect(await holdsWithin(ready, 60_000)).toBe(true);
    child.kill('SIGSTOP');
    return child;
  }

  /**
   * Whether capability `name`'s `script` runs, seen in the host's /proc (its processes carry
   * CAPSULE_CAPABILITY=name): no engine round trip, so a loaded machine cannot make the poll miss the few
   * seconds the call lives before its deadline.
   */
  async function scriptRunning(name: string, script: string): Promise<boolean> {
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const args = (await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')).split('\0');
      if (!args.some((arg) => arg.endsWith(script))) continue;
      // A container's PID 1 (the keep-alive, the watchdog) carries the capability's command in its own
      // arguments, long before that command runs: it is not the script running.
      if (args.includes('capsule-keepalive') || args.includes('capsule-watchdog')) continue;
      const environ = await readFile(`/proc/${entry}/environ`, 'utf8').catch(() => '');
      if (environ.split('\0').includes(`CAPSULE_CAPABILITY=${name}`)) return true;
    }
    return false;
  }

  /**
   * The same, asked inside the running containers of capsule process `pid` (gVisor's processes are not the
   * host's): each container's own /proc, read by an exec.
   */
  async function scriptRunningInside(
    pid: number | undefined,
    name: string,
    script: string,
  ): Promise<boolean> {
    const list = 'for p in /proc/[0-9]*; do tr "\\0" " " < "$p/cmdline"; echo; done';
    for (const c of await engine.listContainers([`capsule.pid=${pid}`, `capsule.capability=${name}`])) {
      if (c.state !== 'running') continue;
      const r = await execa('docker', ['exec', c.id, 'sh', '-c', list], { reject: false });
      const lines = r.stdout.split('\n');
      if (lines.some((l) => l.trim().endsWith(script) && !/capsule-(watchdog|keepalive)/.test(l)))
        return true;
    }
    return false;
  }

  async function endHung(child: ChildProcess): Promise<void> {
    child.kill('SIGKILL');
    child.kill('SIGCONT');
    await exited(child);
  }

  it('the capability attacks its watchdog (kills its parent, floods and holds the fifo, signals PID 1): it still ends', async () => {
    const child = await hungMidCall(
      `tamper-${suffix}`,
      { docker: { image: 'capsule/busybox:1' } },
      [
        "trap '' TERM HUP INT",
        // PID 1 cannot be killed or stopped from inside; try anyway.
        'kill -KILL 1; kill -STOP 1; kill -USR1 1; kill -TERM 1',
        // Hold the watchdog fifo open and write half a line into it, then kill the parent that reports our status.
        'exec 7>/proc/1/fd/4 && printf 9 >&7',
        'kill -KILL $PPID',
        'echo started',
        'while :; do sleep 1; done',
      ].join('\n') + '\n',
    );
    try {
      expect(await holdsWithin(async () => (await runningOf(child.pid)) === 0, 20_000)).toBe(true);
    } finally {
      await endHung(child);
    }
  });

  it('gVisor (runsc): a hung capsule mid-call, the container still stops at its deadline', async () => {
    const child = await hungMidCall(
      `gvisor-${suffix}`,
      // A longer budget: the poll that sees the script start goes through an exec into the container.
      { docker: { image: 'capsule/busybox:1', runtime: 'runsc' }, limits: { timeoutMs: 8000 } },
      "trap '' TERM HUP INT\necho started\nwhile :; do sleep 1; done\n",
      false,
    );
    try {
      expect(await holdsWithin(async () => (await runningOf(child.pid)) === 0, 30_000)).toBe(true);
    } finally {
      await endHung(child);
    }
  });

  it("a reusable (exec) capability with capsule hung mid-call: the exec's own deadline ends the warm container", async () => {
    const child = await hungMidCall(
      `warm-stop-${suffix}`,
      { docker: { image: 'capsule/busybox:1', reusable: true } },
      "trap '' TERM HUP INT\necho started\nwhile :; do sleep 1; done\n",
    );
    try {
      expect(await holdsWithin(async () => (await runningOf(child.pid)) === 0, 20_000)).toBe(true);
    } finally {
      await endHung(child);
    }
  });

  it('a live runner: a parked container that reaches its idle deadline leaves the engine, and the next call still runs', async () => {
    const t = await tempCapability('parked-expiry', { entry: 'run.sh' }, { 'run.sh': 'cat\n' });
    const runner = new DockerRunner({ env: process.env, engine, parkedIdleMs: 1500 });
    const mine = async (): Promise<number> =>
      (await engine.listContainers([`capsule.pid=${process.pid}`, 'capsule.capability=parked-expiry']))
        .length;
    try {
      await runner.prewarm(t.capability);
      expect(await holdsWithin(async () => (await mine()) === 1, 30_000)).toBe(true);
      // Exited by itself and removed by the pool, not only stopped.
      expect(await holdsWithin(async () => (await mine()) === 0, 20_000)).toBe(true);
      const r = await runner.run(
        { capability: t.capability, input: 'after expiry' },
        permitFor(t.capability),
      );
      expect(r).toMatchObject({ exitCode: 0, stdout: 'after expiry', timedOut: false });
    } finally {
      await runner.close();
      await t.cleanup();
    }
  });
});
