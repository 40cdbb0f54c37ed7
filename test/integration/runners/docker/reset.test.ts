import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Capability } from '../../../../src/manifest/types.js';
import type { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { DockerRunner } from '../../../../src/runners/docker/runner.js';
import { capabilityFrom, dockerForTests, tempCapability } from './helpers.js';
import { permitFor } from '../../../helpers/permit.js';

// SysV IPC and flock have no busybox applet: a small static helper does them, built from this source.
const IPC_HELPER = String.raw`
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <unistd.h>
int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "shm")) { int id = shmget(0x5eed, 4096, IPC_CREAT | 0666); char *p = shmat(id, 0, 0); if (p != (void *)-1) strcpy(p, "leak"); return id < 0; }
  if (!strcmp(c, "sem")) return semget(0x5eee, 1, IPC_CREAT | 0666) < 0;
  if (!strcmp(c, "msg")) return msgget(0x5eef, IPC_CREAT | 0666) < 0;
  if (!strcmp(c, "probe")) {
    printf("shm:%s sem:%s msg:%s\n", shmget(0x5eed, 0, 0) < 0 ? "absent" : "PRESENT",
           semget(0x5eee, 0, 0) < 0 ? "absent" : "PRESENT", msgget(0x5eef, 0) < 0 ? "absent" : "PRESENT");
    return 0;
  }
  if (!strcmp(c, "lock-hold")) {
    int fd = open(argv[2], O_RDONLY);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) return 1;
    if (fork() != 0) return 0;
    setsid(); close(0); close(1); close(2);
    for (;;) pause();
  }
  if (!strcmp(c, "lock-probe")) {
    int fd = open(argv[2], O_RDONLY);
    printf("lock:%s\n", fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 ? "free" : "HELD");
    return 0;
  }
  return 2;
}
`;

// One script, two roles: `leave` leaves behind everything a call can; `probe` reports what it sees.
const RUN_SH = `read mode
case "$mode" in
leave)
  mkdir -p /tmp/leak-dir/sub && echo secret > /tmp/leak-dir/sub/file && chmod 000 /tmp/leak-dir/sub /tmp/leak-dir
  echo secret > /tmp/leak-file; echo secret > /tmp/.leak-dot; echo secret > /tmp/..leak-dotdot
  echo 'export LEAK=1' > /tmp/.profile; ln -s /capability/run.sh /tmp/leak-link
  mkfifo /tmp/leak-fifo; echo secret > /dev/shm/leak-posix-shm; echo secret > /dev/mqueue/leak-mq
  touch /tmp/.capsule-watchdog-999999 /tmp/.capsule-run-00000000000000000000000000000000
  export LEAK=1
  ./ipc shm; ./ipc lock-hold /capability/lockfile
  (setsid sh -c 'while :; do echo alive > /tmp/leak-bg; sleep 0.05; done' </dev/null >/dev/null 2>&1 &)
  (sleep 1001 </dev/null >/dev/null 2>&1 &)
  (sh -c 'while :; do sleep 1002 & sleep 0.01; done' </dev/null >/dev/null 2>&1 &)
  sleep 0.2; echo left ;;
ipc-stuck) ./ipc sem; ./ipc msg; ./ipc probe ;;
steal)
  # Compete with PID 1 for the reset line and forge its acknowledgement and the check's verdict.
  # (Once this call is over, that is the control pipe again.)
  (sh -c 'while :; do case "$(readlink /proc/1/fd/0)" in pipe:*) cat /proc/1/fd/0 >/dev/null ;; *) sleep 0.01 ;; esac; done' </dev/null >/dev/null 2>&1 &)
  (sh -c 'while :; do echo capsule-reset-done > /proc/1/fd/1; echo capsule-clean > /proc/1/fd/1; echo alive > /tmp/leak-bg; sleep 0.01; done' </dev/null >/dev/null 2>&1 &)
  sleep 0.2; echo left ;;
inject)
  # Queue a hidden call of its own on PID 1's stdin, to run after this one ends and leave state behind.
  # (PID 1's stdin is the deadline fifo while it waits for this call; its control pipe is another of its fds.)
  for f in /proc/1/fd/*; do
    case "$f" in */1|*/2) continue ;; esac
    case "$(readlink "$f")" in pipe:*) printf 'run 0123456789abcdef0123456789abcdef 6 30\nleave\n' > "$f" ;; esac
  done
  echo left ;;
probe)
  sleep 0.2
  echo "host:$(hostname)"
  echo "files:$(ls -A /tmp /dev/shm /dev/mqueue | grep -v '^/' | grep -v '^$' | tr '\\n' ' ')"
  echo "procs:$(ps -o pid,args | grep -v 'exit 137' | grep -e '[1]001' -e '[1]002' -e '[l]eak-bg' -e '[f]d/0' -e '[c]apsule-reset-done' | tr '\\n' ' ')"
  echo "env:$(env | grep -v -e '^PWD=' -e '^HOSTNAME=' -e '^SHLVL=' -e '^_=' -e '^OLDPWD=' | sort | tr '\\n' ' ')"
  ./ipc probe; ./ipc lock-probe /capability/lockfile
  echo "cwd:$(pwd) $(ls -A | tr '\\n' ' ')"
  echo "writable:$(for d in $(cut -d' ' -f2 /proc/mounts | sort -u); do touch "$d/.w" 2>/dev/null && rm "$d/.w" && echo "$d"; done | tr '\\n' ' ')" ;;
esac
`;

interface Probe {
  host: string;
  files: string[];
  procs: string;
  env: string;
  ipc: string;
  lock: string;
  cwd: string;
  writable: string;
}

function parseProbe(stdout: string): Probe {
  const line = (prefix: string): string =>
    stdout
      .split('\n')
      .find((l) => l.startsWith(prefix))
      ?.slice(prefix.length)
      .trim() ?? `MISSING ${prefix} in ${stdout}`;
  return {
    host: line('host:'),
    files: line('files:').split(' ').filter(Boolean),
    procs: line('procs:'),
    env: line('env:'),
    ipc: stdout.split('\n').find((l) => l.startsWith('shm:')) ?? `MISSING ipc in ${stdout}`,
    lock: line('lock:'),
    cwd: line('cwd:'),
    writable: line('writable:'),
  };
}

/** What a fresh call sees: nothing anywhere writable (PID 1's own fifos live where no call can look). */
function expectUntouched(p: Probe, baseline: Probe, { lock = true } = {}): void {
  expect(p.files).toEqual([]);
  expect(p.procs).toBe('');
  expect(p.env).toBe(baseline.env);
  expect(p.env).not.toContain('LEAK');
  expect(p.ipc).toBe('shm:absent sem:absent msg:absent');
  if (lock) expect(p.lock).toBe('free');
  expect(p.cwd).toBe(baseline.cwd);
}

describe('reset-reusable containers: nothing a call leaves reaches the next call', () => {
  let engine: DockerodeEngine;
  let capability: Capability;
  let cleanup: () => Promise<void>;
  const mine = `capsule.pid=${process.pid}`;

  beforeAll(async () => {
    ({ engine } = await dockerForTests());
    const made = await tempCapability(
      'reset-probe',
      {
        entry: 'run.sh',
        docker: { image: 'capsule/busybox:1', reusable: true },
        limits: { timeoutMs: 10000 },
      },
      { 'run.sh': RUN_SH, 'ipc.c': IPC_HELPER, lockfile: '' },
    );
    cleanup = made.cleanup;
    execFileSync('gcc', ['-static', '-O1', '-o', path.join(made.dir, 'ipc'), path.join(made.dir, 'ipc.c')]);
    await writeFile(path.join(made.dir, 'ipc.c'), '');
    capability = await capabilityFrom(made.dir);
  });

  afterAll(async () => {
    await cleanup();
    expect(await engine.listContainers([mine, 'capsule.capability=reset-probe'])).toEqual([]);
  });

  // One container at most: the next call has to wait for the reset of the same container (or its
  // replacement when the reset fails), so the probe shows what the reset left.
  const oneContainer = (): DockerRunner =>
    new DockerRunner({ env: process.env, engine, prewarm: 0, reusablePerKey: 1 });
  const probe = async (runner: DockerRunner): Promise<Probe> => {
    const r = await runner.run({ capability, input: 'probe\n' }, permitFor(capability));
    expect(r.exitCode).toBe(0);
    return parseProbe(r.stdout);
  };

  it('files in every writable place, a fifo, background processes, a fork loop, a held lock, shm, env: all gone, in the same container', async () => {
    const runner = oneContainer();
    try {
      const baseline = await probe(runner);
      expectUntouched(baseline, baseline);
      // The places the sandbox user can write are exactly the ones the reset wipes.
      expect(baseline.writable).toBe('/dev/mqueue /dev/shm /tmp');
      for (let round = 0; round < 2; round++) {
        const left = await runner.run({ capability, input: 'leave\n' }, permitFor(capability));
        expect(left).toMatchObject({ exitCode: 0, stdout: 'left\n' });
        const after = await probe(runner);
        // Reused, not replaced: the reset itself cleaned it.
        expect(after.host).toBe(baseline.host);
        expectUntouched(after, baseline);
      }
    } finally {
      await runner.close();
    }
  });

  it('state the reset cannot remove (SysV semaphores, message queues) fails the check: the container is discarded', async () => {
    const runner = oneContainer();
    try {
      const baseline = await probe(runner);
      const stuck = await runner.run({ capability, input: 'ipc-stuck\n' }, permitFor(capability));
      expect(stuck.stdout).toBe('shm:absent sem:PRESENT msg:PRESENT\n');
      const after = await probe(runner);
      expect(after.host).not.toBe(baseline.host);
      expectUntouched(after, baseline);
      expect(await engine.listContainers([mine, 'capsule.capability=reset-probe'])).toHaveLength(1);
    } finally {
      await runner.close();
    }
  });

  it('a call that steals the reset line and forges the acknowledgement and the verdict gains nothing', async () => {
    const runner = oneContainer();
    try {
      const baseline = await probe(runner);
      for (let round = 0; round < 3; round++) {
        const left = await runner.run({ capability, input: 'steal\n' }, permitFor(capability));
        // What it forged on PID 1's output while it ran is its own output; the call ended normally.
        expect(left).toMatchObject({ exitCode: 0, timedOut: false });
        expect(left.stdout).toMatch(/^left$/m);
        expectUntouched(await probe(runner), baseline);
      }
    } finally {
      await runner.close();
    }
  });

  it('a call that queues a hidden call of its own on PID 1 for after it ends leaves nothing either', async () => {
    const runner = oneContainer();
    try {
      const baseline = await probe(runner);
      const left = await runner.run({ capability, input: 'inject\n' }, permitFor(capability));
      expect(left).toMatchObject({ exitCode: 0, stdout: 'left\n' });
      expectUntouched(await probe(runner), baseline);
    } finally {
      await runner.close();
    }
  });

  it('concurrent callers each get a clean container; the pool grows under load and stays bounded', async () => {
    const runner = new DockerRunner({ env: process.env, engine, prewarm: 0, reusablePerKey: 3 });
    try {
      const baseline = await probe(runner);
      for (let round = 0; round < 3; round++) {
        const results = await Promise.all(
          [0, 1, 2, 3].map((i) =>
            runner.run({ capability, input: i % 2 === 0 ? 'leave\n' : 'probe\n' }, permitFor(capability)),
          ),
        );
        for (const [i, r] of results.entries()) {
          if (i % 2 === 0) expect(r.stdout).toBe('left\n');
          // The lock file is the same host file in every container: a lock held by a call running at the
          // same time elsewhere is not a leftover, so only the final probe checks it.
          else expectUntouched(parseProbe(r.stdout), baseline, { lock: false });
        }
        expect(
          (await engine.listContainers([mine, 'capsule.capability=reset-probe'])).filter(
            (c) => c.state === 'running',
          ).length,
        ).toBeLessThanOrEqual(3);
      }
      expectUntouched(await probe(runner), baseline);
    } finally {
      await runner.close();
    }
  });
});
