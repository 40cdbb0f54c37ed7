import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { probeHostConfinement } from '../../../../src/runners/host/confinement.js';
import { HostProcesses } from '../../../../src/runners/host/host-processes.js';
import { tempProject } from '../../../helpers/capability.js';
import { killAll, survivors } from '../../../helpers/processes.js';

// A confined init is prestarted for the next call of the same kind (see docs/runners.md). These attacks
// run a hostile call while the next call's init is already waiting, and judge by what the next call
// finds and what is left of the waiting init.

const confinement = probeHostConfinement();
const open: HostProcesses[] = [];
const tokens: string[] = [];
afterEach(async () => {
  for (const p of open.splice(0)) await p.close();
  for (const t of tokens.splice(0)) killAll(t);
});

async function scratch(): Promise<{ root: string; state: string; markers: string }> {
  const { root } = await tempProject('capsule-prestart-');
  const state = path.join(root, 'state.json');
  await writeFile(state, 'trusted\n');
  const markers = path.join(root, 'markers');
  await mkdir(markers);
  tokens.push(markers);
  return { root, state, markers };
}

function call(root: string, state: string, script: string, env: Record<string, string> = {}) {
  return {
    file: 'sh',
    args: ['-c', script],
    cwd: root,
    env: { PATH: '/usr/bin:/bin', ...env },
    output: 'capture' as const,
    outputBytes: 1 << 20,
    timeoutMs: 10_000,
    protection: { readOnly: [state], hidden: [] },
    memoryBytes: 64 * 1024 * 1024,
    pids: 32,
  };
}

/** This process's children whose command line holds `token`, and their children. */
function descendantsWith(token: string): number[] {
  const parentOf = new Map<number, number>();
  const cmd = new Map<number, string>();
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] === 'Z') continue;
      parentOf.set(Number(e), Number(fields[1]));
      cmd.set(Number(e), readFileSync(`/proc/${e}/cmdline`, 'utf8'));
    } catch {
      // gone meanwhile
    }
  }
  const mine = (pid: number): boolean => {
    for (let p = parentOf.get(pid); p !== undefined && p > 1; p = parentOf.get(p))
      if (p === process.pid) return true;
    return false;
  };
  return [...cmd].filter(([pid, c]) => c.includes(token) && mine(pid)).map(([pid]) => pid);
}

describe.runIf(confinement.pidNamespace)('host processes: a prestarted init belongs to its own call', () => {
  it('a hostile call cannot see, kill or seed the next call’s waiting namespace', async () => {
    const { root, state, markers } = await scratch();
    const processes = new HostProcesses(confinement, { prestart: true });
    open.push(processes);
    // Warm-up: after it, the next calls' inits are spawned and waiting.
    expect((await processes.run(call(root, state, 'true'))).exitCode).toBe(0);
    await processes.prestarting();
    const hostile = [
      // Kill everything it can see, by every signal that ends a process, and by name.
      'kill -9 -1 2>/dev/null',
      'for p in /proc/[0-9]*; do kill -9 "${p#/proc/}" 2>/dev/null; done',
      // Write into any fd 3 it can find (a waiting init reads its call's script there).
      `for f in /proc/[0-9]*/fd/3; do printf 'echo seeded > ${markers}/seeded\\n' > "$f" 2>/dev/null; done`,
      // Leave a process behind that would act in the next call's time.
      `setsid sh -c 'sleep 1; echo leaked > "$0/leaked"' "${markers}" &`,
      // Environment for whoever comes next.
      'export LEFT_BY_A=1',
      `echo "$(ls -d /proc/[0-9]* | wc -l)" > ${markers}/a-saw`,
    ].join('\n');
    const a = await processes.run(call(root, state, hostile, { A_SECRET: 'a-secret' }));
    expect(a.confined).toBe(true);
    const before = processes.prestartedRuns;
    const b = await processes.run(
      call(
        root,
        state,
        'echo "pid=$$"; echo ENV; env | sort; echo INIT; tr "\\0" "\\n" < /proc/1/environ | sort; echo "procs=$(ls -d /proc/[0-9]* | wc -l)"',
        { B_SECRET: 'b-secret' },
      ),
    );
    // B ran in an init that was waiting while A ran: A could not kill it.
    expect(processes.prestartedRuns).toBe(before + 1);
    expect(b.exitCode).toBe(0);
    expect(b.stdout).toContain('pid=1\n');
    // Exactly B's environment (PWD is what sh sets for its cwd, as in a fresh init).
    const section = (from: string, to: string): string[] =>
      b.stdout.split(`${from}\n`)[1]!.split(`${to}`)[0]!.split('\n').filter(Boolean);
    const expected = ['B_SECRET=b-secret', 'PATH=/usr/bin:/bin', `PWD=${root}`];
    expect(section('ENV', 'INIT')).toEqual(expected);
    // Its pid 1 (the init, now the command) holds B's environment too, nothing of the wait before it.
    expect(section('INIT', 'procs=')).toEqual(expected);
    expect(b.stdout).not.toContain('A_SECRET');
    expect(b.stdout).not.toContain('LEFT_BY_A');
    // Its /proc holds its own processes only (sh, env/ls, a subshell).
    expect(Number(/procs=(\d+)/.exec(b.stdout)?.[1])).toBeLessThanOrEqual(4);
    // Nothing A wrote reached B's script, and what A left behind died with A.
    expect(await survivors(markers)).toEqual([]);
    expect(existsSync(path.join(markers, 'seeded'))).toBe(false);
    expect(existsSync(path.join(markers, 'leaked'))).toBe(false);
    expect(await readFile(state, 'utf8')).toBe('trusted\n');
  });

  it('a call running beside another prestarted call cannot read its environment or its script', async () => {
    const { root, state, markers } = await scratch();
    const processes = new HostProcesses(confinement, { prestart: true });
    open.push(processes);
    await processes.run(call(root, state, 'true'));
    await processes.prestarting();
    const suffix = `${process.pid}-${Date.now()}`;
    // The patterns live in files, so the searching grep's own command line does not hold them.
    await writeFile(path.join(markers, 'theirs'), `b-secret-${suffix}\n`);
    await writeFile(path.join(markers, 'mine'), `a-secret-${suffix}\n`);
    const search = (pattern: string, out: string): string =>
      `grep -l -a -F -f ${markers}/${pattern} /proc/[0-9]*/environ /proc/[0-9]*/cmdline > ${markers}/${out} 2>/dev/null || true`;
    const before = processes.prestartedRuns;
    const [a] = await Promise.all([
      processes.run(
        call(
          root,
          state,
          `until [ -e ${markers}/b-running ]; do sleep 0.01; done; ${search('theirs', 'found-theirs')}; ${search('mine', 'found-mine')}; touch ${markers}/a-done`,
          {
            A_SECRET: `a-secret-${suffix}`,
          },
        ),
      ),
      processes.run(
        call(root, state, `touch ${markers}/b-running; until [ -e ${markers}/a-done ]; do sleep 0.01; done`, {
          B_SECRET: `b-secret-${suffix}`,
        }),
      ),
    ]);
    // Each waits for the other by a marker file: the search runs while the other call is running.
    expect(a.exitCode).toBe(0);
    expect(processes.prestartedRuns).toBe(before + 2);
    // The search works (it finds the caller's own secret) and finds nothing of the other call.
    expect(await readFile(path.join(markers, 'found-mine'), 'utf8')).toContain('/environ');
    expect(await readFile(path.join(markers, 'found-theirs'), 'utf8')).toBe('');
  });

  it('a prestarted call gets its own limits and read-only state, like a fresh one', async () => {
    const { root, state } = await scratch();
    const processes = new HostProcesses(confinement, { prestart: true });
    open.push(processes);
    await processes.run(call(root, state, 'true'));
    await processes.prestarting();
    const before = processes.prestartedRuns;
    const r = await processes.run({
      ...call(
        root,
        state,
        `echo forged > "${state}" 2>/dev/null; for i in $(seq 1 40); do sleep 5 & done; wait`,
      ),
      pids: 8,
    });
    expect(processes.prestartedRuns).toBe(before + 1);
    expect(r.pidsLimited).toBe(confinement.pidsLimit);
    expect(await readFile(state, 'utf8')).toBe('trusted\n');
  });

  it('inits nobody used are gone after close (no process, no cgroup)', async () => {
    const { root, state } = await scratch();
    const processes = new HostProcesses(confinement, { prestart: true });
    await processes.run(call(root, state, 'true'));
    await processes.prestarting();
    const waiting = descendantsWith('IFS= read -r l');
    expect(waiting.length).toBeGreaterThan(0);
    const groups = confinement.cgroup
      ? readdirSync(confinement.cgroup.pidsParent).filter((n) => n.startsWith(`capsule-${process.pid}-`))
      : [];
    await processes.close();
    expect(
      waiting.filter(
        (pid) =>
          existsSync(`/proc/${pid}/cmdline`) && readFileSync(`/proc/${pid}/cmdline`, 'utf8').length > 0,
      ),
    ).toEqual([]);
    expect(descendantsWith('prestarted')).toEqual([]);
    if (confinement.cgroup) {
      const pidsParent = confinement.cgroup.pidsParent;
      for (const g of groups) expect(existsSync(path.join(pidsParent, g))).toBe(false);
    }
    // Closed: a later call still runs, the fresh way, and leaves nothing waiting.
    expect((await processes.run(call(root, state, 'true'))).exitCode).toBe(0);
    expect(descendantsWith('IFS= read -r l')).toEqual([]);
  });
});
