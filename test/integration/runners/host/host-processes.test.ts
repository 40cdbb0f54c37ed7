import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { exitStatus } from '../../../../src/runners/exit-status.js';
import { describeConfinement, probeHostConfinement } from '../../../../src/runners/host/confinement.js';
import { HostProcesses } from '../../../../src/runners/host/host-processes.js';
import { tempProject } from '../../../helpers/capability.js';
import { REPO_ROOT } from '../../../helpers/cli.js';
import { killAll, pastSleepOf, survivors } from '../../../helpers/processes.js';

const tokens: string[] = [];
afterEach(() => {
  for (const t of tokens.splice(0)) killAll(t);
});

const base = {
  env: { PATH: '/usr/bin:/bin' },
  output: 'capture' as const,
  outputBytes: 1 << 20,
  timeoutMs: 10_000,
};

async function scratch(): Promise<{ root: string; state: string; markers: string }> {
  const { root } = await tempProject('capsule-host-');
  const state = path.join(root, 'state.json');
  await writeFile(state, 'trusted\n');
  const markers = path.join(root, 'markers');
  await mkdir(markers);
  tokens.push(markers);
  return { root, state, markers };
}

const ATTACK = (state: string, markers: string): string =>
  [
    `setsid sh -c 'sleep 1; echo x > "$0/setsid"' "${markers}" &`,
    `echo forged > "${state}"`,
    `umount "${state}" 2>/dev/null; mount -o remount,bind,rw "${state}" 2>/dev/null; echo forged > "${state}"`,
    'sleep 0.1',
  ].join('\n');

describe('host processes: the isolation report says what was measured', () => {
  it('what the probe reports is what an attack finds (pid namespace ⇔ nothing survives; read-only ⇔ unchanged)', async () => {
    const confinement = probeHostConfinement();
    const { root, state, markers } = await scratch();
    const processes = new HostProcesses(confinement);
    const r = await processes.run({
      ...base,
      file: 'sh',
      args: ['-c', ATTACK(state, markers)],
      cwd: root,
      protection: { readOnly: [state], hidden: [] },
    });
    expect(r.confined).toBe(confinement.pidNamespace);
    expect((await survivors(markers)).length === 0).toBe(confinement.pidNamespace);
    expect((await readFile(state, 'utf8')) === 'trusted\n').toBe(confinement.readOnlyPaths);
  });

  it('protects paths with spaces, tabs and backslashes too (the mount table escapes them)', async () => {
    const confinement = probeHostConfinement();
    const { root } = await scratch();
    const odd = path.join(root, 'a dir\twith \\odd');
    await mkdir(odd);
    const state = path.join(odd, 'capsule.json');
    await writeFile(state, 'trusted\n');
    const r = await new HostProcesses(confinement).run({
      ...base,
      file: 'sh',
      args: ['-c', 'echo forged > capsule.json; echo ran'],
      cwd: odd,
      protection: { readOnly: [state], hidden: [] },
    });
    expect(r.stdout).toBe('ran\n');
    expect((await readFile(state, 'utf8')) === 'trusted\n').toBe(confinement.readOnlyPaths);
  });

  it('without the tools it falls back to a process group, still runs, and says it is unconfined', async () => {
    const confinement = probeHostConfinement({ toolDirs: [] });
    expect(confinement.pidNamespace).toBe(false);
    expect(confinement.memoryLimit).toBe(false);
    expect(describeConfinement(confinement)).toMatch(/^unconfined host process/);
    const { root, markers } = await scratch();
    const processes = new HostProcesses(confinement);
    const r = await processes.run({
      ...base,
      file: 'sh',
      args: ['-c', `sh -c 'sleep 30' "${markers}" & echo out; exit 3`],
      cwd: root,
    });
    expect(r).toMatchObject({ exitCode: 3, stdout: 'out\n', confined: false });
    // What stays in the process group still dies with the run.
    expect(await survivors(markers)).toEqual([]);
  });

  it('as an unprivileged user, a user namespace still confines the run (the built module)', async () => {
    const { root, state, markers } = await scratch();
    for (const p of [root, markers]) await chmod(p, 0o777);
    await chown(state, 65534, 65534);
    const script = path.join(root, 'probe.mjs');
    await writeFile(
      script,
      `const { HostProcesses } = await import(${JSON.stringify(path.join(REPO_ROOT, 'dist/runners/host/host-processes.js'))});
const p = new HostProcesses();
const r = await p.run({ file: 'sh', args: ['-c', ${JSON.stringify(ATTACK(state, markers))}], cwd: ${JSON.stringify(root)}, env: { PATH: '/usr/bin:/bin' }, output: 'capture', outputBytes: 65536, timeoutMs: 10000, protection: { readOnly: [${JSON.stringify(state)}], hidden: [] } });
console.log(JSON.stringify({ confinement: p.confinement(), confined: r.confined }));
`,
    );
    const r = await execa(
      'setpriv',
      ['--reuid', '65534', '--regid', '65534', '--clear-groups', 'node', script],
      {
        cwd: root,
        reject: false,
      },
    );
    const report = JSON.parse(r.stdout) as {
      confinement: ReturnType<typeof probeHostConfinement>;
      confined: boolean;
    };
    expect(report.confined).toBe(report.confinement.pidNamespace);
    expect((await survivors(markers)).length === 0).toBe(report.confinement.pidNamespace);
    expect((await readFile(state, 'utf8')) === 'trusted\n').toBe(report.confinement.readOnlyPaths);
    await pastSleepOf(1);
    expect((await readdir(markers)).length === 0).toBe(report.confinement.pidNamespace);
    // Limits need a cgroup an unprivileged user may not create: then the report must say so.
    if (!report.confinement.memoryLimit)
      expect(describeConfinement(report.confinement)).toMatch(/NOT enforced/);
    expect(existsSync(state)).toBe(true);
  });

  it('exit status: the code, else 128 + the signal number, else the fallback', () => {
    expect(exitStatus(3, null, 1)).toBe(3);
    expect(exitStatus(null, 'SIGKILL', 1)).toBe(137);
    expect(exitStatus(null, 'SIGUSR1', 1)).toBe(138);
    expect(exitStatus(null, null, 70)).toBe(70);
  });
});
