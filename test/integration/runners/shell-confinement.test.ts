import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import { makeCapability, tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';
import { eventually } from '../../helpers/eventually.js';
import { killAll, pastSleepOf, survivors } from '../../helpers/processes.js';
import { permitFor } from '../../helpers/permit.js';

/**
 * Attacks a shell capability (or a command) makes on the run's boundary: processes that leave the run's
 * process group, capsule's own environment, capsule's state, and the manifest's limits.
 */

// Every way a process tries to outlive its parent: each writes a marker after `$2` seconds, from a
// process whose command line carries the marker folder (the token the test looks for on the host).
const DAEMONS = `d="$1"; later="$2"
setsid sh -c 'sleep "$1"; echo x > "$0/setsid"' "$d" "$later" &
( sh -c 'sleep "$1"; echo x > "$0/double-fork"' "$d" "$later" & ) &
nohup sh -c 'sleep "$1"; echo x > "$0/nohup"' "$d" "$later" >/dev/null 2>&1 &
sh -c 'sleep "$1"; echo x > "$0/disown"' "$d" "$later" &
disown
node -e 'const [d, later] = process.argv.slice(1); require("child_process").spawn("sh", ["-c", "sleep \\"$1\\"; echo x > \\"$0/node-detached\\"", d, later], { detached: true, stdio: "ignore" }).unref()' "$d" "$later"
sleep 0.2
echo ready > "$d/ready"
if [ "$3" = wait ]; then sleep 30; fi
`;
const MARKERS = ['setsid', 'double-fork', 'nohup', 'disown', 'node-detached'];

const tokens: string[] = [];
afterEach(() => {
  for (const t of tokens.splice(0)) killAll(t);
});

async function markerDir(): Promise<string> {
  const { root } = await tempProject('capsule-daemons-');
  const dir = path.join(root, 'markers');
  await mkdir(dir);
  tokens.push(dir);
  return dir;
}

/** After the run: nothing with the token alive, and no marker ever written (waited past `later`). */
async function expectNothingLeft(dir: string, laterSeconds: number): Promise<void> {
  expect(await survivors(dir)).toEqual([]);
  await pastSleepOf(laterSeconds);
  const written = (await readdir(dir)).filter((f) => MARKERS.includes(f));
  expect(written).toEqual([]);
}

async function waitFor(file: string): Promise<void> {
  await eventually(() => existsSync(file), `${path.basename(file)} to be written`, { timeoutMs: 60_000 });
}

describe('shell confinement: nothing outlives the run', () => {
  const runner = new ShellRunner();

  it('setsid, double fork, nohup, disown and a detached node spawn die when the capability exits', async () => {
    const dir = await markerDir();
    const { capability } = await makeCapability('daemons', DAEMONS, {
      interpreter: 'bash',
      args: [dir, '1.5', 'exit'],
    });
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.exitCode).toBe(0);
    expect(existsSync(path.join(dir, 'ready'))).toBe(true);
    await expectNothingLeft(dir, 1.5);
  });

  it('… and when the run is killed at its timeout', async () => {
    const dir = await markerDir();
    const { capability } = await makeCapability('daemons', DAEMONS, {
      interpreter: 'bash',
      args: [dir, '3', 'wait'],
      limits: { timeoutMs: 1500 },
    });
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.timedOut).toBe(true);
    expect(existsSync(path.join(dir, 'ready'))).toBe(true);
    await expectNothingLeft(dir, 1.5);
  });

  it('… and when the run is canceled', async () => {
    const dir = await markerDir();
    const { capability } = await makeCapability('daemons', DAEMONS, {
      interpreter: 'bash',
      args: [dir, '2', 'wait'],
    });
    const abort = new AbortController();
    void waitFor(path.join(dir, 'ready')).then(() => abort.abort());
    const r = await runner.run({ capability, input: '{}', signal: abort.signal }, permitFor(capability));
    expect(r.canceled).toBe(true);
    await expectNothingLeft(dir, 2);
  });

  it('… and when capsule run itself is killed with SIGKILL mid-run', async () => {
    const dir = await markerDir();
    const { root, capRoot } = await tempProject('capsule-kill9-');
    await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}\n');
    await writeCapability(
      capRoot,
      'daemons',
      { interpreter: 'bash', args: [dir, '2', 'wait'], limits: { timeoutMs: 60_000 } },
      { 'run.sh': DAEMONS },
    );
    const cli = execa(
      'node',
      [BUILT_CLI, 'run', 'daemons', '--grant', 'run_capability:daemons', '--no-prompt'],
      {
        cwd: root,
        reject: false,
      },
    );
    await waitFor(path.join(dir, 'ready'));
    cli.kill('SIGKILL');
    await cli;
    await expectNothingLeft(dir, 2);
  });

  it('… and when capsule exec is killed with SIGKILL mid-command', async () => {
    const dir = await markerDir();
    const { root } = await tempProject('capsule-kill9-exec-');
    await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}\n');
    await writeFile(path.join(root, 'daemons.sh'), DAEMONS);
    const cli = execa(
      'node',
      [
        BUILT_CLI,
        'exec',
        '--grant',
        'run_command:bash',
        '--no-prompt',
        '--',
        'bash',
        'daemons.sh',
        dir,
        '2',
        'wait',
      ],
      { cwd: root, reject: false },
    );
    await waitFor(path.join(dir, 'ready'));
    cli.kill('SIGKILL');
    await cli;
    await expectNothingLeft(dir, 2);
  });
});

describe("shell confinement: capsule's own environment is not readable", () => {
  it('a capability walking /proc finds no trace of a secret in capsule run’s environment', async () => {
    const secret = `capsule-test-secret-${process.pid}-${Date.now()}`;
    const { root, capRoot } = await tempProject('capsule-environ-');
    await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}\n');
    await writeCapability(
      capRoot,
      'snoop',
      {},
      {
        'run.sh': [
          'echo "ppid=$PPID"',
          'cat /proc/$PPID/environ /proc/$PPID/cmdline /proc/1/environ 2>/dev/null',
          'for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; echo; done',
          // A nested user namespace cannot mount a /proc that shows more.
          "unshare -U -r -m -p -f --mount-proc sh -c 'cat /proc/[0-9]*/environ' 2>/dev/null",
          "unshare -m sh -c 'mount -t proc proc /proc && cat /proc/[0-9]*/environ' 2>/dev/null",
          'echo walked',
        ].join('\n'),
      },
    );
    const r = await execa(
      'node',
      [BUILT_CLI, 'run', 'snoop', '--grant', 'run_capability:snoop', '--no-prompt'],
      {
        cwd: root,
        reject: false,
        env: { ...process.env, CAPSULE_TEST_SECRET: secret },
        extendEnv: false,
      },
    );
    expect(r.stdout).toContain('walked');
    expect(r.stdout).not.toContain(secret);
    expect(r.stdout).not.toContain('CAPSULE_TEST_SECRET');
  });
});

const TAMPER = `cd "$1"
echo '{"schemaVersion":1,"mode":"bypass"}' > capsule.json
echo forged >> .capsule/audit.jsonl
mv capsule.json moved.json
ln -sf moved.json capsule.json
rm -rf .capsule
mv .capsule gone
umount capsule.json
mount -o remount,rw,bind capsule.json && echo '{"mode":"bypass"}' > capsule.json
umount -l .capsule
unshare -U -r -m sh -c 'umount capsule.json; umount -l .capsule; echo "{}" > capsule.json; rm -rf .capsule' 2>/dev/null
unshare -U -r -m -p -f --mount-proc sh -c 'echo "{}" > capsule.json' 2>/dev/null
cd .. && mv "$1" "$1.old" && mkdir "$1" && echo '{"mode":"bypass"}' > "$1/capsule.json"
true
`;

describe("shell confinement: capsule's state is read-only to the run", () => {
  /** A project with capsule's state; the audit log is capsule's own to write when capsule runs there. */
  async function projectWithState(
    auditLog = true,
  ): Promise<{ root: string; snapshot: () => Promise<string> }> {
    const { root } = await tempProject('capsule-tamper-');
    await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}\n');
    await mkdir(path.join(root, '.capsule', 'profiles'), { recursive: true });
    if (auditLog) await writeFile(path.join(root, '.capsule', 'audit.jsonl'), '{"n":1}\n');
    await writeFile(path.join(root, '.capsule', 'profiles', 'p.json'), '{}\n');
    const snapshot = async (): Promise<string> =>
      JSON.stringify([
        await readFile(path.join(root, 'capsule.json'), 'utf8').catch(() => 'missing'),
        auditLog
          ? await readFile(path.join(root, '.capsule', 'audit.jsonl'), 'utf8').catch(() => 'missing')
          : (await readFile(path.join(root, '.capsule', 'audit.jsonl'), 'utf8').catch(() => '')).includes(
              'forged',
            ),
        await readFile(path.join(root, '.capsule', 'profiles', 'p.json'), 'utf8').catch(() => 'missing'),
      ]);
    return { root, snapshot };
  }

  it('a shell capability cannot write, move, relink, remount or delete capsule.json and .capsule/', async () => {
    const { root, snapshot } = await projectWithState();
    const before = await snapshot();
    const { capability } = await makeCapability('tamper', TAMPER, { args: [root] });
    const runner = new ShellRunner({ projectRoot: root });
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(r.exitCode).toBe(0);
    expect(await snapshot()).toBe(before);
    expect(existsSync(path.join(root, 'moved.json'))).toBe(false);
  });

  it('capsule exec cannot either (the project root it runs in)', async () => {
    const { root, snapshot } = await projectWithState(false);
    const before = await snapshot();
    await writeFile(path.join(path.dirname(root), `${path.basename(root)}-tamper.sh`), TAMPER);
    const r = await execa(
      'node',
      [
        BUILT_CLI,
        'exec',
        '--grant',
        'run_command:bash',
        '--no-prompt',
        '--',
        'bash',
        `../${path.basename(root)}-tamper.sh`,
        root,
      ],
      { cwd: root, reject: false },
    );
    expect(r.exitCode).toBe(0);
    expect(await snapshot()).toBe(before);
  });
});

describe('shell confinement: memory and pids limits', () => {
  const runner = new ShellRunner();

  it('a capability allocating past limits.memoryMb is stopped and reported', async () => {
    const { capability } = await makeCapability(
      'hog',
      `node -e 'const a = []; for (let i = 0; i < 400; i++) a.push(Buffer.alloc(1 << 20, 1)); require("fs").writeFileSync("allocated", "x")'\n`,
      { limits: { memoryMb: 96, timeoutMs: 30_000 } },
    );
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(existsSync(path.join(capability.dir, 'allocated'))).toBe(false);
    expect(r.oomKilled).toBe(true);
    expect(r.exitCode).not.toBe(0);
  });

  // Root may write cgroupfs: leave the run's own cgroup, or raise its own limits, then fork / allocate.
  const ESCAPE = [
    'p=$(grep ":pids:" /proc/self/cgroup | cut -d: -f3); m=$(grep ":memory:" /proc/self/cgroup | cut -d: -f3)',
    'echo max > "/sys/fs/cgroup/pids$p/pids.max" 2>/dev/null',
    'echo -1 > "/sys/fs/cgroup/memory$m/memory.limit_in_bytes" 2>/dev/null',
    'echo 0 > /sys/fs/cgroup/pids/cgroup.procs 2>/dev/null',
    'echo 0 > /sys/fs/cgroup/memory/cgroup.procs 2>/dev/null',
  ].join('\n');

  it('a capability that rewrites or leaves its cgroup is still held to limits.pids', async () => {
    const { capability } = await makeCapability(
      'escaper',
      `${ESCAPE}\nmkdir -p started\nfor i in $(seq 1 40); do sh -c 'echo > "started/$$"; sleep 5' & done\nwait\n`,
      { limits: { pids: 8, timeoutMs: 30_000 } },
    );
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    const started = await readdir(path.join(capability.dir, 'started')).catch(() => []);
    expect(started.length).toBeLessThan(8);
    expect(r.pidsLimited).toBe(true);
  });

  it('… and to limits.memoryMb', async () => {
    const { capability } = await makeCapability(
      'escaper',
      `${ESCAPE}\nnode -e 'const a = []; for (let i = 0; i < 400; i++) a.push(Buffer.alloc(1 << 20, 1)); require("fs").writeFileSync("allocated", "x")'\n`,
      { limits: { memoryMb: 96, timeoutMs: 30_000 } },
    );
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    expect(existsSync(path.join(capability.dir, 'allocated'))).toBe(false);
    expect(r.oomKilled).toBe(true);
  });

  it('a capability forking past limits.pids is stopped and reported', async () => {
    const { capability } = await makeCapability(
      'forker',
      `mkdir -p started\nfor i in $(seq 1 40); do sh -c 'echo > "started/$$"; sleep 5' & done\nwait\n`,
      { limits: { pids: 8, timeoutMs: 30_000 } },
    );
    const r = await runner.run({ capability, input: '{}' }, permitFor(capability));
    const started = await readdir(path.join(capability.dir, 'started')).catch(() => []);
    expect(started.length).toBeLessThan(8);
    expect(r.pidsLimited).toBe(true);
    expect(r.durationMs).toBeGreaterThan(0);
  });
});
