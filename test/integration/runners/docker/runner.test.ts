import { chmod, mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import { capabilityFrom, dockerForTests, tempCapability } from './helpers.js';
import { eventually } from '../../../helpers/eventually.js';
import { processesWith, survivors } from '../../../helpers/processes.js';
import { permitFor, withPermit } from '../../../helpers/permit.js';
import { writeCapability } from '../../../helpers/capability.js';

// A container's processes are host processes too: a token in a command line tells when a call really runs.
const SLEEPING = `capsule-runner-test-${process.pid}`;

describe('DockerRunner', () => {
  let engine: DockerodeEngine;
  let runner: DockerRunner;
  const cleanups: Array<() => Promise<void>> = [];
  const mine = `capsule.pid=${process.pid}`;

  beforeAll(async () => {
    ({ engine } = await dockerForTests());
    runner = new DockerRunner({ engine, env: { GRANTED_VAR: 'granted-value', SECRET_VAR: 'must-not-leak' } });
  });

  afterAll(async () => {
    await runner.close();
    await Promise.all(cleanups.map((c) => c()));
    expect(await engine.listContainers([mine])).toEqual([]);
  });

  async function temp(name: string, manifest: Record<string, unknown>, files: Record<string, string>) {
    const t = await tempCapability(name, manifest, files);
    cleanups.push(t.cleanup);
    return t.capability;
  }

  it('passes input on stdin and returns stdout, stderr and a non-zero exit code as data', async () => {
    const capability = await temp(
      'echo-input',
      { entry: 'run.sh' },
      { 'run.sh': 'cat; echo; echo to-stderr >&2; exit 7\n' },
    );
    const result = await runner.run({ capability, input: '{"name":"world"}' }, permitFor(capability));
    expect(result).toMatchObject({
      environment: 'docker',
      exitCode: 7,
      signal: null,
      stdout: '{"name":"world"}\n',
      stderr: 'to-stderr\n',
      timedOut: false,
      canceled: false,
      truncated: false,
      oomKilled: false,
    });
    expect(result.durationMs).toBeGreaterThan(0);
  });

  it('passes only granted environment variables', async () => {
    const capability = await temp(
      'env-grant',
      { entry: 'run.sh', grants: { env: ['GRANTED_VAR'] } },
      { 'run.sh': 'env | sort\n' },
    );
    const result = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(result.stdout).toContain('GRANTED_VAR=granted-value');
    expect(result.stdout).not.toContain('SECRET_VAR');
    expect(result.stdout).not.toContain('must-not-leak');
  });

  it('mounts each fs grant alone under /project, read-only or read-write as granted', async () => {
    const project = await realpath(await mkdtemp(path.join(tmpdir(), 'capsule-project-')));
    cleanups.push(() => rm(project, { recursive: true, force: true }));
    await mkdir(path.join(project, 'data'));
    await mkdir(path.join(project, 'out'));
    // World-writable: only the mount mode decides whether uid 65534 may write.
    await chmod(path.join(project, 'data'), 0o777);
    await chmod(path.join(project, 'out'), 0o777);
    await mkdir(path.join(project, 'private'));
    await writeFile(path.join(project, 'data', 'in.txt'), 'input-data');
    await writeFile(path.join(project, 'private', 'secret.txt'), 'not granted');
    const capability = await temp(
      'fs-grants',
      {
        entry: 'run.sh',
        grants: {
          fs: [
            { path: 'data', mode: 'ro' },
            { path: 'out', mode: 'rw' },
          ],
        },
      },
      {
        'run.sh': [
          'cat /project/data/in.txt; echo',
          '(echo x > /project/data/new.txt) 2>/dev/null && echo ro=written || echo ro=denied',
          'echo result > /project/out/result.txt && echo rw=written',
          'ls /project',
          'cat /project/private/secret.txt 2>/dev/null || echo private=absent',
        ].join('\n'),
      },
    );
    capability.fsGrants = [
      { declared: 'data', hostPath: path.join(project, 'data'), mode: 'ro' },
      { declared: 'out', hostPath: path.join(project, 'out'), mode: 'rw' },
    ];
    const result = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(result.stdout).toContain('input-data');
    expect(result.stdout).toContain('ro=denied');
    expect(result.stdout).toContain('rw=written');
    expect(result.stdout).toContain('private=absent');
    expect(await readFile(path.join(project, 'out', 'result.txt'), 'utf8')).toBe('result\n');
    // A writable host mount: works, and is reported as not sandboxed.
    expect(runner.isolation(capability).sandboxed).toBe(false);
  });

  it('cancels a running call through its AbortSignal and removes the container', async () => {
    const capability = await temp(
      'cancel-me',
      { entry: 'run.sh', limits: { timeoutMs: 30_000 } },
      { 'run.sh': `echo started; sh -c 'sleep 30; :' ${SLEEPING}-cancel\n` },
    );
    const controller = new AbortController();
    const result = runner.run({ capability, input: '{}', signal: controller.signal }, permitFor(capability));
    // Abort once the capability is past its echo (its sleep is running), not after a guessed delay.
    await eventually(() => processesWith(`${SLEEPING}-cancel`).length > 0, 'the capability to be sleeping');
    controller.abort();
    expect(await result).toMatchObject({
      canceled: true,
      timedOut: false,
      exitCode: null,
      stdout: 'started\n',
    });
    expect(await survivors(`${SLEEPING}-cancel`)).toEqual([]);
  });

  it('close() cancels calls in flight and leaves nothing behind', async () => {
    const closing = new DockerRunner({ env: process.env, engine });
    const capability = await temp(
      'closed-mid-call',
      { entry: 'run.sh', limits: { timeoutMs: 30_000 } },
      { 'run.sh': `echo started; sh -c 'sleep 30; :' ${SLEEPING}-close\n` },
    );
    const call = closing.run({ capability, input: '{}' }, permitFor(capability));
    await eventually(() => processesWith(`${SLEEPING}-close`).length > 0, 'the capability to be sleeping');
    await closing.close();
    const result = await call;
    expect(result).toMatchObject({ canceled: true, exitCode: null, stdout: 'started\n' });
    expect(await engine.listContainers([mine, 'capsule.capability=closed-mid-call'])).toEqual([]);
    await expect(closing.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'RUNNER_UNAVAILABLE',
    });
  });

  it('an already aborted signal starts nothing', async () => {
    const capability = await temp('never-start', { entry: 'run.sh' }, { 'run.sh': 'echo ran\n' });
    const result = await runner.run(
      { capability, input: '{}', signal: AbortSignal.abort() },
      permitFor(capability),
    );
    expect(result.canceled).toBe(true);
    expect(result.stdout).toBe('');
  });

  it('runs node capabilities on the offline node image', async () => {
    const capability = await temp(
      'node-cap',
      {
        entry: 'main.js',
        interpreter: 'node',
        docker: { image: 'capsule/node:1' },
        limits: { memoryMb: 256, timeoutMs: 20_000 },
      },
      {
        'main.js':
          'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const x=JSON.parse(s);console.log(JSON.stringify({hello:x.name, node:process.version}));});\n',
      },
    );
    const result = await runner.run({ capability, input: '{"name":"docker"}' }, permitFor(capability));
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual({ hello: 'docker', node: process.version });
  });

  it('a missing interpreter is a RUNNER_FAILED error naming the cause, not a hang', async () => {
    const capability = await temp(
      'no-python',
      { entry: 'main.py', interpreter: 'python3' },
      { 'main.py': 'print(1)\n' },
    );
    await expect(runner.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'RUNNER_FAILED',
      message: /python3/,
    });
  });

  it('an entry that is not executable and has no interpreter is RUNNER_FAILED', async () => {
    const capability = await temp(
      'not-exec',
      { entry: 'run.sh', interpreter: undefined },
      { 'run.sh': 'echo hi\n' },
    );
    await expect(runner.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'RUNNER_FAILED',
      message: /Permission denied/,
    });
  });

  it('an unknown image that capsule cannot build is RUNNER_UNAVAILABLE naming the manifest field', async () => {
    const capability = await temp(
      'other-image',
      { entry: 'run.sh', docker: { image: 'no-such/image:9' } },
      { 'run.sh': 'true\n' },
    );
    await expect(runner.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'RUNNER_UNAVAILABLE',
      details: { field: 'docker.image', file: capability.manifestPath },
    });
  });

  it('copies capability files into a volume when asked (remote engines), read-only', async () => {
    const copying = new DockerRunner({ env: process.env, engine, capabilityFiles: 'copy', prewarm: 0 });
    try {
      const capability = await temp(
        'copied',
        { entry: 'run.sh' },
        {
          'run.sh': 'cat /capability/data.txt; (echo x > /capability/x) 2>/dev/null || echo ro\n',
          'data.txt': 'copied-data\n',
        },
      );
      const result = await copying.run({ capability, input: '{}' }, permitFor(capability));
      expect(result.stdout).toBe('copied-data\nro\n');
      expect(
        (await engine.listVolumes(['capsule.managed=1'])).some((v) => v.includes(`-p${process.pid}-`)),
      ).toBe(true);
    } finally {
      await copying.close();
    }
    expect(
      (await engine.listVolumes(['capsule.managed=1'])).some((v) => v.includes(`-p${process.pid}-`)),
    ).toBe(false);
  });

  it('keeps one prepared container ready after a call, and close() removes it', async () => {
    const pooled = new DockerRunner({ env: process.env, engine, prewarm: 1 });
    const capability = await temp(
      'pooled',
      { entry: 'run.sh' },
      { 'run.sh': 'echo $HOSTNAME; echo state >> /tmp/state; wc -l < /tmp/state\n' },
    );
    const first = await pooled.run({ capability, input: '{}' }, permitFor(capability));
    const second = await pooled.run({ capability, input: '{}' }, permitFor(capability));
    // Fresh container each call: a different hostname and no state carried over.
    expect(first.stdout.split('\n')[0]).not.toBe(second.stdout.split('\n')[0]);
    expect(second.stdout.split('\n')[1]).toBe('1');
    // Created and started ahead, parked in the gate: nothing of the capability has run in it.
    const parked = async (): Promise<number> =>
      (await engine.listContainers([mine, 'capsule.capability=pooled'])).filter((c) => c.state === 'running')
        .length;
    await eventually(async () => (await parked()) >= 1, 'a container parked in the gate', {
      intervalMs: 100,
    });
    expect(await parked()).toBe(1);
    await pooled.close();
    expect(await engine.listContainers([mine, 'capsule.capability=pooled'])).toEqual([]);
  });

  it('reusable capabilities reuse a container, reset between calls: no state reaches the next call', async () => {
    const warm = new DockerRunner({ env: process.env, engine, prewarm: 0 });
    try {
      const capability = await temp(
        'warm',
        {
          entry: 'run.sh',
          docker: { image: 'capsule/busybox:1', reusable: true },
          limits: { timeoutMs: 1500 },
        },
        {
          'run.sh':
            'read x; echo state >> /tmp/state; wc -l < /tmp/state; [ "$x" = sleep ] && sleep 30; exit 4\n',
        },
      );
      const a = await warm.run({ capability, input: 'go\n' }, permitFor(capability));
      const b = await warm.run({ capability, input: 'go\n' }, permitFor(capability));
      expect(a).toMatchObject({ exitCode: 4, stdout: '1\n' });
      expect(b).toMatchObject({ exitCode: 4, stdout: '1\n' });
      const slow = await warm.run({ capability, input: 'sleep\n' }, permitFor(capability));
      expect(slow).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGKILL' });
      // The timed-out container was retired: the next call starts from a clean one.
      const c = await warm.run({ capability, input: 'go\n' }, permitFor(capability));
      expect(c.stdout).toBe('1\n');
    } finally {
      await warm.close();
    }
    expect(await engine.listContainers([mine, 'capsule.capability=warm'])).toEqual([]);
  });

  it('streams a large input through stdin and handles concurrent calls in separate containers', async () => {
    const capability = await temp('big-input', { entry: 'run.sh' }, { 'run.sh': 'wc -c; hostname\n' });
    const big = 'x'.repeat(3 * 1024 * 1024);
    const results = await Promise.all(
      [0, 1, 2, 3].map(() => runner.run({ capability, input: big }, permitFor(capability))),
    );
    for (const r of results) expect(r.stdout.split('\n')[0]?.trim()).toBe(String(big.length));
    expect(new Set(results.map((r) => r.stdout.split('\n')[1])).size).toBe(4);
  });

  it('exec pool: OOM and output floods are reported and retire the warm container', async () => {
    const warm = new DockerRunner({ env: process.env, engine, prewarm: 0 });
    try {
      const capability = await temp(
        'warm-hostile',
        {
          entry: 'run.sh',
          docker: { image: 'capsule/busybox:1', reusable: true },
          limits: { memoryMb: 32, outputBytes: 1000 },
        },
        {
          'run.sh':
            'read x; echo state >> /tmp/state; [ "$x" = oom ] && exec dd if=/dev/zero of=/dev/null bs=512M count=1; [ "$x" = flood ] && exec yes; wc -l < /tmp/state\n',
        },
      );
      expect((await warm.run({ capability, input: 'go\n' }, permitFor(capability))).stdout).toBe('1\n');
      const oom = await warm.run({ capability, input: 'oom\n' }, permitFor(capability));
      expect(oom).toMatchObject({ oomKilled: true, exitCode: null, signal: 'SIGKILL' });
      expect((await warm.run({ capability, input: 'go\n' }, permitFor(capability))).stdout).toBe('1\n');
      const flood = await warm.run({ capability, input: 'flood\n' }, permitFor(capability));
      expect(flood.truncated).toBe(true);
      expect(flood.stdout.length).toBe(1000);
      expect((await warm.run({ capability, input: 'go\n' }, permitFor(capability))).stdout).toBe('1\n');
    } finally {
      await warm.close();
    }
  });

  it('refuses non-docker capabilities', async () => {
    const capability = await temp(
      'shell-one',
      { entry: 'run.sh', environment: 'shell', docker: undefined },
      { 'run.sh': 'true\n' },
    );
    await expect(runner.run({ capability, input: '{}' }, permitFor(capability))).rejects.toMatchObject({
      code: 'UNSUPPORTED',
      details: { field: 'environment' },
    });
  });
});

describe('DockerRunner without an engine', () => {
  it('reports unavailable with a reason and fails a run with RUNNER_UNAVAILABLE', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-noengine-'));
    try {
      const engine = new DockerodeEngine({ socketPath: path.join(dir, 'missing.sock') });
      const runner = new DockerRunner({ env: process.env, engine, engineTimeoutMs: 1000 });
      const availability = await runner.available();
      expect(availability.ok).toBe(false);
      if (!availability.ok) expect(availability.reason).toMatch(/no Docker engine answers|not usable/);
      await writeCapability(
        dir,
        'x',
        {
          description: 'x',
          environment: 'docker',
          interpreter: undefined,
          docker: { image: 'capsule/busybox:1' },
        },
        { 'run.sh': 'true\n' },
      );
      await expect(
        runner.run(...withPermit({ capability: await capabilityFrom(path.join(dir, 'x')), input: '{}' })),
      ).rejects.toMatchObject({ code: 'RUNNER_UNAVAILABLE' });
      await runner.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('the hello-docker example capability', () => {
  it('runs as shipped and greets from inside the sandbox as nobody', async () => {
    const { engine } = await dockerForTests();
    const runner = new DockerRunner({ env: process.env, engine });
    try {
      const dir = fileURLToPath(new URL('../../../../capabilities/hello-docker/', import.meta.url));
      const result = await runner.run(
        ...withPermit({ capability: await capabilityFrom(dir), input: '{"name":"reader"}' }),
      );
      expect(result.exitCode).toBe(0);
      expect(JSON.parse(result.stdout)).toMatchObject({ greeting: 'hello, reader', uid: 65534 });
      expect(runner.isolation(await capabilityFrom(dir)).sandboxed).toBe(true);
    } finally {
      await runner.close();
    }
  });
});
