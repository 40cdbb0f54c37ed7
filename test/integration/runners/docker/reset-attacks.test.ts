import { execFileSync } from 'node:child_process';
import { execa } from 'execa';
import { copyFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Capability } from '../../../../src/manifest/types.js';
import { IMAGE_TOOLS, type CallOutcome } from '../../../../src/runners/docker/call.js';
import type { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import type { ContainerSpec, DockerEngine } from '../../../../src/runners/docker/engine.js';
import { ExecPool } from '../../../../src/runners/docker/exec-pool.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import { CAPABILITY_LABEL, ownerLabels, processOwner } from '../../../../src/runners/docker/labels.js';
import { buildContainerSpec } from '../../../../src/runners/docker/spec.js';
import { holdsWithin } from '../../../helpers/eventually.js';
import { capabilityFrom, dockerForTests, tempCapability } from './helpers.js';
import { permitFor } from '../../../helpers/permit.js';

// Attacks by one call of a reset-reusable container on the calls after it, judged by what the next call in
// the same container sees (files, HOME, processes, sockets), by the engine's own process list and by whether
// the container survived. Each attack on the keep-alive itself has a control: the same attack on a pool whose
// keep-alive runs as the call user (the defence off, a switch only tests set), where it works. Attacks that
// leave state behind show in the attacking call's own output that the state was there when it ended.

const ATTACK_C = fileURLToPath(new URL('./reset-attack.c', import.meta.url));

const RUN_SH = `read mode arg
mine() { for p in /proc/[0-9]*; do tr '\\0' '\\n' < "$p/environ" 2>/dev/null | grep -qx CAPSULE_LEFTOVER=1 && echo "\${p#/proc/}:$(tr '\\0' ' ' < "$p/cmdline")"; done | tr '\\n' ';'; }
writable() {
  for m in $(cut -d' ' -f2 /proc/mounts | sort -u); do
    case "$m" in /proc|/proc/*|/sys|/sys/*) continue ;; esac
    find "$m" -xdev \\( -type d -o -type f \\) 2>/dev/null
  done | sort -u | while read -r p; do [ -w "$p" ] && echo "$p"; done
}
case "$mode" in
probe)
  echo "host:$(hostname)"
  echo "files:$(ls -A /tmp /dev/shm /dev/mqueue | grep -v -e '^/' -e '^$' | tr '\\n' ' ')"
  echo "home:$HOME"
  echo "left:$(mine)"
  ./attack unix-probe capsule-leak-hold; ./attack unix-probe capsule-leak-inflight
  echo "leaks:$(for m in $(cut -d' ' -f2 /proc/mounts | sort -u); do case "$m" in /proc|/proc/*|/sys|/sys/*) continue ;; esac; find "$m" -xdev -name .capsule-leak 2>/dev/null; done | sort -u | tr '\\n' ' ')"
  echo "writable:$(writable | tr '\\n' ' ')" ;;
mem|vm|ptrace)
  # Turn PID 1's test of whether a folder is empty into one that always says so ([ -e ] and [ -L ] become
  # [ -z ], false for any name): its reset then skips the wipe and still answers clean.
  echo secret > /tmp/leak-file
  ./attack "$mode" 1 -e=-z -L=-z ;;
signals)
  for t in 1 $PPID; do
    for s in STOP CONT TERM USR1 INT HUP KILL; do
      if kill -$s $t 2>/dev/null; then echo "$t-$s:sent"; else echo "$t-$s:refused"; fi
    done
  done
  sleep 0.2; echo done ;;
hide)
  export CAPSULE_LEFTOVER=1
  (setsid sleep 1001 </dev/null >/dev/null 2>&1 &)
  ./attack stopped; ./attack forkloop; ./attack zombie; ./attack rename; ./attack watch
  ./attack unix-hold capsule-leak-hold; ./attack unix-inflight capsule-leak-inflight
  sh -c 'trap "" TERM HUP INT; while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 &
  sleep 0.3
  echo "relay:$(ps -o args | grep -c '^[.]/attack forkloop')"
  echo "alive:$(mine)" ;;
creds)
  grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t ' ' ' | sed 's/ $//'
  echo "pid1 $(grep -E '^(Uid|CapEff):' /proc/1/status | tr -s '\t ' ' ' | tr '\n' ' ')"
  [ "$(cut -d' ' -f6 /proc/self/stat)" = "$(cut -d' ' -f6 /proc/1/stat)" ] && echo session:PID1 || echo session:own
  if nsenter -S 0 -G 0 -- true 2>/dev/null; then echo setuid:GAINED; else echo setuid:refused; fi ;;
everywhere)
  for d in $(writable); do [ -d "$d" ] && touch "$d/.capsule-leak" && echo "wrote:$d/.capsule-leak"; done
  ./attack keyring ;;
esac
`;

interface Probe {
  host: string;
  files: string[];
  home: string;
  left: string;
  unix: string[];
  leaks: string;
  writable: string[];
}

function field(stdout: string, prefix: string): string {
  return (
    stdout
      .split('\n')
      .find((l) => l.startsWith(prefix))
      ?.slice(prefix.length)
      .trim() ?? `MISSING ${prefix} in ${stdout}`
  );
}

function parseProbe(stdout: string): Probe {
  return {
    host: field(stdout, 'host:'),
    files: field(stdout, 'files:').split(' ').filter(Boolean),
    home: field(stdout, 'home:'),
    left: field(stdout, 'left:'),
    unix: stdout.split('\n').filter((l) => l.startsWith('capsule-leak-')),
    leaks: field(stdout, 'leaks:'),
    writable: field(stdout, 'writable:').split(' ').filter(Boolean),
  };
}

/** Nothing of an earlier call: no files, HOME as configured, no process, no socket, no marker anywhere. */
function expectFresh(p: Probe): void {
  expect(p.files).toEqual([]);
  expect(p.home).toBe('/tmp');
  expect(p.left).toBe('');
  expect(p.unix).toEqual(['capsule-leak-hold:absent', 'capsule-leak-inflight:absent']);
  expect(p.leaks).toBe('');
}

describe('reset-reusable containers: one call cannot influence the next', () => {
  let engine: DockerodeEngine;
  let capability: Capability;
  let cleanup: () => Promise<void>;
  const owner = processOwner();
  const mine = `capsule.instance=${owner.instance}`;

  beforeAll(async () => {
    ({ engine } = await dockerForTests());
    const made = await tempCapability(
      'reset-attack',
      {
        entry: 'run.sh',
        docker: { image: 'capsule/busybox:1', reusable: true },
        limits: { timeoutMs: 10000 },
      },
      { 'run.sh': RUN_SH },
    );
    cleanup = made.cleanup;
    await copyFile(ATTACK_C, path.join(made.dir, 'attack.c'));
    execFileSync('gcc', [
      '-static',
      '-O1',
      '-o',
      path.join(made.dir, 'attack'),
      path.join(made.dir, 'attack.c'),
    ]);
    capability = made.capability;
  });

  afterAll(async () => {
    await cleanup();
    expect(await engine.listContainers([mine])).toEqual([]);
  });

  /**
   * One container at most (the next call waits for the reset of the same one, or its replacement when the
   * reset fails). `control`: the keep-alive runs as the call user, the defence off; `'same-uid'`: as the
   * call user, but from its unreadable copy of busybox (non-dumpable), so that layer is judged alone.
   */
  function pool(
    control: boolean | 'same-uid',
    via: DockerEngine = engine,
  ): {
    run: (input: string, timeoutMs?: number) => Promise<CallOutcome>;
    probe: () => Promise<Probe>;
    /** The engine's own list of the container's processes once its reset has been verified. */
    processesWhenReady: () => Promise<number[]>;
    close: () => Promise<void>;
  } {
    const execPool = new ExecPool(via, {
      maxPerKey: 1,
      keepaliveAsCallUser: control !== false,
      keepaliveDumpable: control === true,
    });
    const spec = buildContainerSpec(capability, {
      capabilityFiles: { type: 'bind', hostPath: capability.dir },
      labels: { ...ownerLabels(owner), [CAPABILITY_LABEL]: 'reset-attack' },
      hostEnv: {},
      cpus: 1,
    });
    const run = (input: string, timeoutMs = 10000): Promise<CallOutcome> => {
      const limits = { ...capability.manifest.limits, timeoutMs };
      const cap = { ...capability, manifest: { ...capability.manifest, limits } };
      return execPool.run('k', spec, cap, input, undefined, IMAGE_TOOLS);
    };
    return {
      run,
      probe: async () => {
        const r = await run('probe\n');
        expect(r.exitCode, r.stderr).toBe(0);
        return parseProbe(r.stdout);
      },
      processesWhenReady: async () => {
        await holdsWithin(() => execPool.counts('k').idle > 0, 60_000, 20);
        expect(execPool.counts('k').idle).toBe(1);
        const [container] = await engine.listContainers([mine]);
        return container === undefined ? [] : engine.processes(container.id);
      },
      close: () => execPool.close(),
    };
  }

  // Each defence judged alone: the separate uid (and the non-dumpable PID 1 with it), then the non-dumpable
  // PID 1 by itself with the uid separation off.
  for (const [defence, attack, what, why] of [
    [false, 'mem', 'a write to /proc/1/mem', 'the next call sees nothing'],
    [false, 'vm', 'process_vm_writev into PID 1', 'the next call sees nothing'],
    [false, 'ptrace', 'ptrace (POKEDATA) of PID 1', 'the next call sees nothing'],
    ['same-uid', 'mem', "a write to /proc/1/mem by PID 1's own uid", 'PID 1 runs a file it cannot read'],
    [
      'same-uid',
      'ptrace',
      "ptrace (POKEDATA) of PID 1 by PID 1's own uid",
      'PID 1 runs a file it cannot read',
    ],
  ] as const) {
    it(`${what} patching the keep-alive's reset: refused, ${why}`, async () => {
      const p = pool(defence);
      try {
        const baseline = await p.probe();
        expectFresh(baseline);
        const r = await p.run(`${attack}\n`);
        expect(r.stdout).toMatch(new RegExp(`^${attack}:denied:`, 'm'));
        const after = await p.probe();
        expect(after.host).toBe(baseline.host);
        expectFresh(after);
      } finally {
        await p.close();
      }
    });
  }

  for (const [attack, what] of [
    ['mem', 'a write to /proc/1/mem'],
    ['ptrace', 'ptrace (POKEDATA) of PID 1'],
  ] as const) {
    it(`control: ${what} works when the keep-alive runs as the call user`, async () => {
      const p = pool(true);
      try {
        const baseline = await p.probe();
        expectFresh(baseline);
        const r = await p.run(`${attack}\n`);
        expect(r.stdout).toMatch(new RegExp(`^${attack}:patched:[1-9]`, 'm'));
        const after = await p.probe();
        // The same container, "reset and verified", still holds what the attacking call left.
        expect(after.host).toBe(baseline.host);
        expect(after.files).toContain('leak-file');
      } finally {
        await p.close();
      }
    });
  }

  it("control: process_vm_writev has no working control here: the engine's seccomp profile refuses it even as the same user", async () => {
    const p = pool(true);
    try {
      const r = await p.run('vm\n');
      expect(r.stdout).toBe('vm:denied:Operation not permitted\n');
    } finally {
      await p.close();
    }
  });

  it('signals to PID 1 and to the helper that waits for the call (STOP, CONT, TERM, USR1, INT, HUP, KILL): refused, the container serves on', async () => {
    const p = pool(false);
    try {
      const baseline = await p.probe();
      const r = await p.run('signals\n');
      expect(r).toMatchObject({ exitCode: 0, timedOut: false });
      expect(r.stdout).toMatch(/^done$/m);
      expect(r.stdout).not.toMatch(/:sent$/m);
      expect(r.stdout.match(/:refused$/gm)).toHaveLength(14);
      const after = await p.probe();
      expect(after.host).toBe(baseline.host);
      expectFresh(after);
    } finally {
      await p.close();
    }
  });

  it('control: the same signals end the container when the keep-alive runs as the call user', async () => {
    const p = pool(true);
    try {
      const baseline = await p.probe();
      const r = await p.run('signals\n', 4000);
      expect(r.stdout).toMatch(/:sent$/m);
      expect(r.stdout).not.toMatch(/^done$/m);
      const after = await p.probe();
      expect(after.host).not.toBe(baseline.host);
    } finally {
      await p.close();
    }
  });

  it('processes that hide (setsid, double fork, stopped, a fork relay, zombies, renamed, a ptrace watcher, ignored signals) and the sockets they hold: none survives the reset', async () => {
    const p = pool(false);
    try {
      const baseline = await p.probe();
      for (let round = 0; round < 2; round++) {
        const r = await p.run('hide\n');
        expect(r.exitCode, JSON.stringify(r)).toBe(0);
        // The attack worked: all of them were alive when the call ended.
        const alive = field(r.stdout, 'alive:');
        for (const name of [
          'sleep 1001',
          './attack stopped',
          './attack zombie',
          'capsule-keepalive rename renamed',
          './attack watch',
          './attack unix-hold',
          'trap',
        ])
          expect(alive).toContain(name);
        // The relay changes pid too often to be found by the scan above.
        expect(Number(field(r.stdout, 'relay:'))).toBeGreaterThanOrEqual(1);
        expect(r.stdout).toMatch(/^unix-hold:bound$/m);
        expect(r.stdout).toMatch(/^unix-inflight:queued$/m);
        // The engine, from outside: PID 1 alone.
        expect(await p.processesWhenReady()).toHaveLength(1);
        const after = await p.probe();
        // Reset in place: the engine saw PID 1 alone, and the next call sees nothing of them.
        expect(after.host).toBe(baseline.host);
        expectFresh(after);
      }
    } finally {
      await p.close();
    }
  });

  it('every place the call user can write (found by search, not listed) is wiped before the next call', async () => {
    const p = pool(false);
    try {
      const baseline = await p.probe();
      // Directories and regular files writable by the call user anywhere in the container.
      expect(baseline.writable).toEqual(['/dev/mqueue', '/dev/shm', '/tmp']);
      const r = await p.run('everywhere\n');
      expect(r.stdout.match(/^wrote:/gm)).toHaveLength(3);
      // Kernel keyrings (per uid, not per container) are out of reach: the engine's seccomp profile.
      expect(r.stdout).toMatch(/^keyring:denied:Operation not permitted$/m);
      const after = await p.probe();
      expect(after.host).toBe(baseline.host);
      expectFresh(after);
      expect(after.writable).toEqual(baseline.writable);
    } finally {
      await p.close();
    }
  });

  it('a call runs as the bare call user in a session of its own; PID 1 is root with only KILL, SETUID, SETGID', async () => {
    const p = pool(false);
    try {
      const r = await p.run('creds\n');
      expect(r.stdout.split('\n')).toEqual([
        'Uid: 65534 65534 65534 65534',
        'Gid: 65534 65534 65534 65534',
        'Groups:',
        'CapInh: 0000000000000000',
        'CapPrm: 0000000000000000',
        'CapEff: 0000000000000000',
        // The bounding set still names PID 1's three, but nothing can bring them back: no-new-privileges
        // ignores setuid and file capabilities, and the permitted set is empty.
        'CapBnd: 00000000000000e0',
        'CapAmb: 0000000000000000',
        'NoNewPrivs: 1',
        'Seccomp: 2',
        'pid1 Uid: 0 0 0 0 CapEff: 00000000000000e0 ',
        'session:own',
        'setuid:refused',
        '',
      ]);
    } finally {
      await p.close();
    }
  });

  /** An engine that quietly changes what capsule asked for its warm containers. */
  function tampering(change: (spec: ContainerSpec) => ContainerSpec): DockerEngine {
    const wrapped = Object.create(engine) as DockerEngine;
    wrapped.createContainer = (spec) => engine.createContainer(change(spec));
    return wrapped;
  }

  for (const [what, change] of [
    ['runs PID 1 as the call user', (s: ContainerSpec) => ({ ...s, user: '65534:65534' })],
    [
      'drops no-new-privileges',
      (s: ContainerSpec) => ({ ...s, securityOpt: s.securityOpt.filter((o) => o !== 'no-new-privileges') }),
    ],
  ] as const) {
    it(`an engine that ${what} for the keep-alive: the first check fails, no call runs in it`, async () => {
      const p = pool(false, tampering(change));
      try {
        await expect(p.run('creds\n')).rejects.toMatchObject({ code: 'RUNNER_FAILED' });
      } finally {
        await p.close();
      }
      expect(await engine.listContainers([mine])).toEqual([]);
    });
  }

  it("an image that is not capsule's (no shell, no busybox): the keep-alive from capsule's tools volume separates the same way", async () => {
    const image = `capsule-test/reuse-empty:${process.pid}`;
    await execa('sh', ['-c', `tar -cf - -T /dev/null | docker import - ${image}`]);
    const made = await tempCapability(
      'reset-attack-empty',
      {
        interpreter: undefined,
        entry: 'attack',
        args: ['status'],
        docker: { image, reusable: true },
        limits: { timeoutMs: 10000 },
      },
      {},
    );
    const runner = new DockerRunner({ env: process.env, engine, prewarm: 0, reusablePerKey: 1 });
    try {
      await copyFile(path.join(capability.dir, 'attack'), path.join(made.dir, 'attack'));
      const empty = await capabilityFrom(made.dir);
      const first = await runner.run({ capability: empty, input: 'leave' }, permitFor(empty));
      const second = await runner.run({ capability: empty, input: '' }, permitFor(empty));
      for (const r of [first, second]) {
        expect(r.exitCode, r.stderr).toBe(0);
        expect(r.stdout).toMatch(/^Uid:\s+65534\s+65534\s+65534\s+65534$/m);
        expect(r.stdout).toMatch(/^CapEff:\s+0{16}$/m);
        expect(r.stdout).toMatch(/^CapPrm:\s+0{16}$/m);
        expect(r.stdout).toMatch(/^NoNewPrivs:\s+1$/m);
        expect(r.stdout).toMatch(/^tmp:absent$/m);
      }
      // Reset in place, not replaced.
      expect(field(second.stdout, 'host:')).toBe(field(first.stdout, 'host:'));
    } finally {
      await runner.close();
      await made.cleanup();
      await execa('docker', ['rmi', image], { reject: false });
    }
  });
});
