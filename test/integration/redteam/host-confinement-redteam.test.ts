import { chmod, chown, mkdir, readFile, readdir, symlink, writeFile } from 'node:fs/promises';
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { describeConfinement, probeHostConfinement } from '../../../src/runners/host/confinement.js';
import { HostProcesses } from '../../../src/runners/host/host-processes.js';
import { refusedNumbers } from '../../../src/runners/seccomp.js';
import { tempProject } from '../../helpers/capability.js';
import { BUILT_CLI, commandKey, REPO_ROOT } from '../../helpers/cli.js';
import { pastSleepOf } from '../../helpers/processes.js';

/**
 * Routes around the host confinement that its own tests do not take: other descriptors, other names,
 * other daemons, other ABIs, a state folder that is not there yet, and stops raced from inside. Each is
 * judged by effect — a protected file's bytes, what a hidden folder gave away, a marker written after the
 * run was over, a process (or container) still alive — as root and as an ordinary user.
 */

const NOBODY = 65534;
const SECRET = `secret-${process.pid}-${Date.now()}`;
const confinement = probeHostConfinement();
const DOCKER_IMAGE = 'capsule/busybox:1';
const RUN = `rt${process.pid}`;

interface Scene {
  root: string;
  project: string;
  /** capsule's read-only state (a file in the project's .capsule/). */
  state: string;
  /** capsule's hidden per-user state, holding a key. */
  hidden: string;
}

type Owner = 'root' | 'user';

async function own(owner: Owner, ...paths: string[]): Promise<void> {
  if (owner === 'user') for (const p of paths) await chown(p, NOBODY, NOBODY);
}

async function scene(owner: Owner, name = 'proj'): Promise<Scene> {
  const { root } = await tempProject(`capsule-rt-${owner}-`);
  await chmod(root, 0o755);
  const project = path.join(root, name);
  await mkdir(path.join(project, '.capsule'), { recursive: true });
  const state = path.join(project, '.capsule', 'policy.json');
  await writeFile(state, 'trusted\n');
  const hidden = path.join(root, 'home', 'state', 'capsule');
  await mkdir(hidden, { recursive: true });
  await writeFile(path.join(hidden, 'key'), SECRET);
  await own(
    owner,
    root,
    project,
    path.join(project, '.capsule'),
    state,
    path.join(root, 'home'),
    path.join(root, 'home', 'state'),
    hidden,
    path.join(hidden, 'key'),
  );
  return { root, project, state, hidden };
}

/** `capsule exec` of `command` (granted exactly) in `cwd`, as root or as the ordinary user; never an internal error. */
async function capsuleExec(owner: Owner, s: Scene, cwd: string, command: string): Promise<void> {
  const key = await commandKey(command);
  const user =
    owner === 'user'
      ? ['setpriv', '--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups']
      : [];
  const argv = [...user, process.execPath, BUILT_CLI, 'exec', '--grant', key, '--no-prompt', '--', command];
  const r = await execa(argv[0] as string, argv.slice(1), {
    cwd,
    reject: false,
    extendEnv: false,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: s.root,
      CAPSULE_STATE_DIR: path.join(s.root, `state-${owner}`),
      XDG_CACHE_HOME: path.join(s.root, `cache-${owner}`),
    },
  });
  expect(r.stderr).not.toContain('internal error');
}

interface DriveOptions {
  readOnly?: string[];
  hidden?: string[];
  timeoutMs?: number;
  /** Extra supplementary groups of the ordinary user (e.g. the docker group). */
  groups?: number[];
  /** Redirections capsule's own process inherits from whoever starts it (bash syntax, e.g. `200<file`). */
  inherit?: string;
  prestart?: boolean;
  /** Calls run one after the other in the same HostProcesses (the last one's output is returned). */
  scripts?: string[];
  cwd?: string;
}

interface Driven {
  confined: boolean;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  exitCode: number | null;
}

/** Runs `script` (sh) confined through the built module, as root or as an ordinary user. */
async function confined(owner: Owner, s: Scene, script: string, o: DriveOptions = {}): Promise<Driven> {
  const driver = path.join(s.root, `driver-${Math.random().toString(36).slice(2)}.mjs`);
  const scripts = o.scripts ?? [script];
  await writeFile(
    driver,
    `const { HostProcesses } = await import(${JSON.stringify(path.join(REPO_ROOT, 'dist/runners/host/host-processes.js'))});
const p = new HostProcesses(undefined, { prestart: ${o.prestart === true} });
let r;
for (const script of ${JSON.stringify(scripts)}) {
  r = await p.run({ file: 'sh', args: ['-c', script], cwd: ${JSON.stringify(o.cwd ?? s.project)},
    env: { PATH: '/usr/local/bin:/usr/bin:/bin', S: ${JSON.stringify(s.state)}, H: ${JSON.stringify(s.hidden)},
      R: ${JSON.stringify(s.root)}, P: ${JSON.stringify(s.project)}, RUN: ${JSON.stringify(RUN)} },
    output: 'capture', outputBytes: 1 << 20, timeoutMs: ${o.timeoutMs ?? 30000},
    protection: { readOnly: ${JSON.stringify(o.readOnly ?? [s.state])}, hidden: ${JSON.stringify(o.hidden ?? [s.hidden])} } });
  if (${o.prestart === true}) await p.prestarting();
}
await p.close();
process.stdout.write(JSON.stringify({ confined: r.confined, stdout: r.stdout, stderr: r.stderr, timedOut: r.timedOut, exitCode: r.exitCode }));
`,
  );
  await own(owner, driver);
  const user =
    owner === 'user'
      ? [
          'setpriv',
          '--reuid',
          String(NOBODY),
          '--regid',
          String(NOBODY),
          ...(o.groups === undefined ? ['--clear-groups'] : ['--groups', o.groups.join(',')]),
        ]
      : [];
  // bash: its redirections take descriptors above 9 (node passes on inherited ones from about 20 up).
  const argv = [...user, 'bash', '-c', `exec node "$0" ${o.inherit ?? ''}`, driver];
  const r = await execa(argv[0] as string, argv.slice(1), {
    cwd: s.root,
    reject: false,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
  });
  let out: Driven;
  try {
    out = JSON.parse(r.stdout) as Driven;
  } catch {
    throw new Error(`driver failed: ${r.stderr}`);
  }
  expect(out.confined).toBe(true);
  return out;
}

it('the machine confines host processes (every attack below runs confined)', () => {
  expect(confinement.missing).toEqual([]);
  expect(confinement.stop).toBe('freeze-then-kill');
});

/* ------------------------------------------------------------------------------------------------ */
/* Daemons: a confined command that asks a privileged daemon for what the confinement refuses it.    */
/* ------------------------------------------------------------------------------------------------ */

const dockerUp = (() => {
  try {
    return existsSync('/var/run/docker.sock') && statSync('/var/run/docker.sock').isSocket();
  } catch {
    return false;
  }
})();
const dockerGid = dockerUp ? statSync('/var/run/docker.sock').gid : 0;
const containers: string[] = [];
afterAll(async () => {
  for (const c of containers) await execa('docker', ['rm', '-f', c], { reject: false });
});

describe.each([
  ['root', undefined],
  ['user', [dockerGid]],
] as const)('the Docker socket as %s (an ordinary user is put in the socket’s group)', (owner, groups) => {
  it('a confined command cannot start a container that rewrites capsule’s read-only state', async () => {
    expect(dockerUp).toBe(true);
    const s = await scene(owner);
    const out = await confined(
      owner,
      s,
      `docker run --rm --user 0 --network none -v "$S":/x ${DOCKER_IMAGE} sh -c 'echo forged > /x' 2>&1 || echo refused`,
      { groups: groups === undefined ? undefined : [...groups] },
    );
    expect(await readFile(s.state, 'utf8'), out.stdout + out.stderr).toBe('trusted\n');
  });

  it('a confined command cannot read the hidden state through a container', async () => {
    const s = await scene(owner);
    const out = await confined(
      owner,
      s,
      `docker run --rm --user 0 --network none -v "$H":/k:ro ${DOCKER_IMAGE} cat /k/key 2>&1 || echo refused`,
      { groups: groups === undefined ? undefined : [...groups] },
    );
    expect(out.stdout).not.toContain(SECRET);
  });

  it('nothing of the run is alive after a stop: not even a container it asked the daemon for', async () => {
    const s = await scene(owner);
    const name = `capsule-rt-${owner}-${process.pid}`;
    containers.push(name);
    const out = await confined(
      owner,
      s,
      `docker run -d --user 0 --name ${name} --network none ${DOCKER_IMAGE} sleep 300 >/dev/null 2>&1; sleep 60`,
      { timeoutMs: 3000, groups: groups === undefined ? undefined : [...groups] },
    );
    expect(out.timedOut).toBe(true);
    const alive = await execa('docker', ['inspect', '-f', '{{.State.Running}}', name], { reject: false });
    expect(alive.stdout.trim()).not.toBe('true');
  });
});

/* ------------------------------------------------------------------------------------------------ */
/* Descriptors capsule did not open itself                                                         */
/* ------------------------------------------------------------------------------------------------ */

describe.each(['root', 'user'] as const)('descriptors as %s', (owner) => {
  it('a descriptor capsule inherited on the hidden key does not reach the command', async () => {
    const s = await scene(owner);
    const out = await confined(owner, s, 'cat /proc/self/fd/200 2>/dev/null; true', {
      inherit: `200<"${path.join(s.hidden, 'key')}"`,
    });
    expect(out.stdout).not.toContain(SECRET);
  });

  it('a descriptor capsule inherited on the project’s .capsule/ does not let the command write it', async () => {
    const s = await scene(owner);
    const out = await confined(
      owner,
      s,
      'echo forged > /proc/self/fd/200/policy.json 2>/dev/null && echo wrote; true',
      { inherit: `200<"${path.dirname(s.state)}"` },
    );
    expect(await readFile(s.state, 'utf8'), out.stdout).toBe('trusted\n');
  });

  it('no descriptor of whoever started capsule reaches the command (fresh and prestarted)', async () => {
    const s = await scene(owner);
    const list =
      'for f in /proc/self/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] && echo "extra:$n:$(readlink $f)"; done; true';
    // A descriptor of whoever started capsule (here one on the protected file, fd 200).
    const inherit = `200<"${s.state}"`;
    const extra = (out: string): string[] =>
      out
        .split('\n')
        // The glob's own descriptor on /proc/self/fd is gone by the time it is read (no target); one
        // that is /dev/null holds nothing of anyone.
        .filter((l) => l.startsWith('extra:') && !/^extra:\d+:(\/dev\/null)?$/.test(l));
    const fresh = await confined(owner, s, list, { inherit });
    expect(extra(fresh.stdout)).toEqual([]);
    const prestarted = await confined(owner, s, list, { inherit, prestart: true, scripts: ['true', list] });
    expect(extra(prestarted.stdout)).toEqual([]);
  });

  it('a link through /proc/self/fd of an open read-only file gives no writable name', async () => {
    const s = await scene(owner);
    await confined(
      owner,
      s,
      `exec 7<"$S"; perl -e 'syscall(265, -100, "/proc/self/fd/7", -100, "$ENV{P}/alias", 0x400) == 0 or print "linkat: $!\\n"';
       ln "$S" "$P/alias2" 2>/dev/null; for a in "$P/alias" "$P/alias2"; do [ -e "$a" ] && echo forged > "$a"; done; true`,
    );
    expect(await readFile(s.state, 'utf8')).toBe('trusted\n');
  });
});

/* ------------------------------------------------------------------------------------------------ */
/* Names: symlinks, paths that do not exist yet, odd bytes                                          */
/* ------------------------------------------------------------------------------------------------ */

describe.each(['root', 'user'] as const)('names as %s', (owner) => {
  it('a symlink on the way to the hidden state cannot be re-pointed at a planted state folder', async () => {
    const s = await scene(owner);
    // XDG_STATE_HOME through a link (a dotfiles-managed home, a CI cache mount): root/link -> home.
    const linked = path.join(s.root, 'link');
    await symlink('home', linked);
    await own(owner, linked);
    const hidden = path.join(linked, 'state', 'capsule');
    const out = await confined(
      owner,
      s,
      `mkdir -p "$R/fake/state/capsule" && echo planted > "$R/fake/state/capsule/confirmed" &&
       rm "$R/link" && ln -s fake "$R/link" && echo swapped; true`,
      { hidden: [hidden] },
    );
    // What capsule reads at its state folder's name is still its own.
    expect((await readdir(hidden)).sort(), out.stdout).toEqual(['key']);
  });

  it('a protected file that is a symlink cannot be replaced', async () => {
    const s = await scene(owner);
    const real = path.join(s.root, 'shared-capsule.json');
    await writeFile(real, '{"trusted":true}\n');
    const config = path.join(s.project, 'capsule.json');
    // Relative (a link to an absolute path makes bwrap refuse to start the run at all: closed, not open).
    await symlink(path.relative(s.project, real), config);
    await own(owner, real, config);
    const out = await confined(
      owner,
      s,
      'rm -f "$P/capsule.json" && echo \'{"mode":"bypass"}\' > "$P/capsule.json"; echo ran; true',
      { readOnly: [config, s.state] },
    );
    expect(out.stdout).toContain('ran');
    expect(await readFile(config, 'utf8')).toBe('{"trusted":true}\n');
  });

  it('a protected file that is an absolute symlink: the command does not run at all (closed, not open)', async () => {
    const s = await scene(owner);
    const real = path.join(s.root, 'shared-capsule.json');
    await writeFile(real, '{"trusted":true}\n');
    const config = path.join(s.project, 'capsule.json');
    await symlink(real, config);
    await own(owner, real, config);
    const marker = path.join(s.root, 'ran-anyway');
    const out = await confined(
      owner,
      s,
      `: > "${marker}"; rm -f "$P/capsule.json" && echo '{"mode":"bypass"}' > "$P/capsule.json"`,
      { readOnly: [config, s.state] },
    );
    expect(existsSync(marker), out.stderr).toBe(false);
    expect(await readFile(config, 'utf8')).toBe('{"trusted":true}\n');
  });

  it('the state folder inside the project’s .capsule/, and a project inside the state folder', async () => {
    const s = await scene(owner);
    const inner = path.join(path.dirname(s.state), 'state');
    await mkdir(inner);
    await writeFile(path.join(inner, 'key'), SECRET);
    await own(owner, inner, path.join(inner, 'key'));
    const nested = path.join(s.hidden, 'proj');
    await mkdir(path.join(nested, '.capsule'), { recursive: true });
    await writeFile(path.join(nested, '.capsule', 'policy.json'), 'trusted\n');
    await own(owner, nested, path.join(nested, '.capsule'), path.join(nested, '.capsule', 'policy.json'));
    const out = await confined(
      owner,
      s,
      `cat "${inner}/key" "$H/key" "${nested}/.capsule/policy.json" 2>/dev/null; echo forged > "$S"; echo forged > "${inner}/key"; true`,
      { readOnly: [s.state, path.join(nested, '.capsule')], hidden: [inner, s.hidden] },
    );
    expect(out.stdout).not.toContain(SECRET);
    expect(await readFile(s.state, 'utf8')).toBe('trusted\n');
    expect(await readFile(path.join(inner, 'key'), 'utf8')).toBe(SECRET);
  });

  it('a .capsule/ that does not exist at the first run: a link planted then is no way around it later', async () => {
    const s = await scene(owner);
    const fresh = path.join(s.root, 'fresh');
    await mkdir(fresh);
    await own(owner, fresh);
    const audit = path.join(fresh, '.capsule', 'audit.jsonl');
    // Through capsule itself: its runtime makes .capsule/ before the first host run, so the first command
    // finds it read-only; it tries to plant the audit log as a hard link to a file of its own.
    const exec = (command: string): Promise<void> => capsuleExec(owner, s, fresh, command);
    await exec('rm -f .capsule/audit.jsonl; mkdir -p .capsule; : > evil; ln evil .capsule/audit.jsonl');
    await exec('true');
    // What it writes is not in its command line (the log records that): six Qs.
    await exec("head -c 6 /dev/zero | tr '\\0' Q > evil");
    expect(readFileSync(path.join(fresh, 'evil'), 'utf8')).toBe('QQQQQQ');
    // capsule's log holds its own records only, under one name.
    expect(readFileSync(audit, 'utf8')).not.toContain('QQQQQQ');
    expect(statSync(audit).nlink).toBe(1);
  });

  it('Claude Code’s project settings through capsule exec: not planted when .claude/ is missing, not swapped when it is a link', async () => {
    const s = await scene(owner);
    const exec = (cwd: string, command: string): Promise<void> => capsuleExec(owner, s, cwd, command);
    // No .claude/ at all: the run can make neither the folder's settings nor a hooks script.
    const fresh = path.join(s.root, 'fresh');
    await mkdir(fresh);
    await own(owner, fresh);
    await exec(
      fresh,
      'mkdir -p .claude/hooks; echo planted > .claude/settings.local.json; echo x > .claude/hooks/h.sh',
    );
    expect(existsSync(path.join(fresh, '.claude', 'settings.local.json'))).toBe(false);
    expect(existsSync(path.join(fresh, '.claude', 'hooks'))).toBe(false);
    // .claude/ a relative link to a shared folder: neither re-pointed nor written through.
    const shared = path.join(s.root, 'shared-claude');
    await mkdir(shared);
    await writeFile(path.join(shared, 'settings.json'), 'trusted\n');
    const linked = path.join(s.root, 'linked');
    await mkdir(linked);
    await mkdir(path.join(linked, 'src'));
    await symlink('../shared-claude', path.join(linked, '.claude'));
    await own(
      owner,
      shared,
      path.join(shared, 'settings.json'),
      linked,
      path.join(linked, '.claude'),
      path.join(linked, 'src'),
    );
    await exec(
      linked,
      'echo forged > .claude/settings.json; mv .claude gone; mkdir .claude; echo forged > .claude/settings.json; echo ok > src/built.txt',
    );
    expect(await readFile(path.join(shared, 'settings.json'), 'utf8')).toBe('trusted\n');
    expect(await readFile(path.join(linked, '.claude', 'settings.json'), 'utf8')).toBe('trusted\n');
    // Control: the rest of the project is the run's to write (the folder holding the link keeps its entries,
    // as for a linked capsule.json: what is in them stays writable).
    expect(await readFile(path.join(linked, 'src', 'built.txt'), 'utf8')).toBe('ok\n');
  });

  it('odd bytes in a protected path (a newline, a leading dash, spaces, a backslash) do not unprotect it', async () => {
    const s = await scene(owner, '-odd\nname \\ x');
    const out = await confined(
      owner,
      s,
      'echo forged > "$S"; mv "$S" "$S.x"; rm -rf "$(dirname "$S")"; true',
    );
    expect(await readFile(s.state, 'utf8'), out.stderr).toBe('trusted\n');
  });

  it('a cwd inside the hidden folder shows nothing of it', async () => {
    const s = await scene(owner);
    const out = await confined(owner, s, 'cat key ./* 2>/dev/null; ls -A; true', { cwd: s.hidden });
    expect(out.stdout).not.toContain(SECRET);
  });
});

/* ------------------------------------------------------------------------------------------------ */
/* capsule's own code: what the next capsule process runs                                           */
/* ------------------------------------------------------------------------------------------------ */

describe('capsule’s own code, as root', () => {
  it('a confined command cannot change the code the next capsule process runs (its package, node)', async () => {
    const s = await scene('root');
    const planted = path.join(REPO_ROOT, 'dist', `.rt-planted-${RUN}`);
    try {
      // access(2) only for the node binary: nothing is written to it.
      const out = await confined(
        'root',
        s,
        `: > ${JSON.stringify(planted)} 2>/dev/null && echo planted; [ -w ${JSON.stringify(process.execPath)} ] && echo node-writable; true`,
      );
      expect(existsSync(planted), out.stdout).toBe(false);
      expect(out.stdout).not.toContain('node-writable');
    } finally {
      await execa('rm', ['-f', planted]);
    }
  });
});

/* ------------------------------------------------------------------------------------------------ */
/* Devices and kernel interfaces (read-only checks only: nothing here writes a host tunable)        */
/* ------------------------------------------------------------------------------------------------ */

describe.each(['root', 'user'] as const)('devices and kernel interfaces as %s', (owner) => {
  it('a device node left on a bound file system does not open (nodev)', async () => {
    const s = await scene(owner);
    // A harmless device (/dev/zero's numbers) stands in for a disk: this machine's device cgroup keeps
    // even capsule from its block devices, so a disk could not show the control.
    const node = path.join(s.root, 'disk');
    await execa('mknod', ['-m', '0600', node, 'c', '1', '5']);
    await own(owner, node);
    // Control: outside, the node opens.
    const control = await execa('sh', ['-c', `head -c 4096 "${node}" | wc -c`]);
    expect(control.stdout.trim()).toBe('4096');
    const out = await confined(owner, s, 'head -c 4096 "$R/disk" 2>/dev/null | wc -c');
    expect(out.stdout.trim()).toBe('0');
  });

  it('nothing under /proc outside the run’s own processes is writable but the pressure triggers', async () => {
    const s = await scene(owner);
    // access(2) only (`find -writable`): nothing is opened for writing.
    const out = await confined(
      owner,
      s,
      `find /proc \\( -path '/proc/[0-9]*' -o -path /proc/self -o -path /proc/thread-self \\) -prune -o -writable \\( -type f -o -type d \\) -print 2>/dev/null; true`,
    );
    const writable = out.stdout
      .split('\n')
      .filter(Boolean)
      // Pressure triggers are per opener; /proc/mtrr checks CAP_SYS_ADMIN over the host on write.
      .filter((f) => !/^\/proc\/pressure\/(cpu|io|memory|irq)$/.test(f) && f !== '/proc/mtrr');
    expect(writable).toEqual([]);
  });

  it('nothing under /sys is writable, by any submount', async () => {
    const s = await scene(owner);
    const out = await confined(
      owner,
      s,
      // The last mount on a path is the one in force (one shadowed below it is not reachable).
      `awk '{ o[$5] = $6 } END { for (m in o) if (m ~ /^\\/(sys|proc\\/sys)(\\/|$)/ && o[m] !~ /^ro(,|$)/) print "rw:" m }' /proc/self/mountinfo`,
    );
    expect(out.stdout.trim()).toBe('');
  });

  it('/dev/shm is the run’s own: capsule’s shared memory is not visible, and nothing is left in it', async () => {
    const s = await scene(owner);
    const mine = `/dev/shm/capsule-rt-${process.pid}`;
    await writeFile(mine, SECRET);
    try {
      const out = await confined(owner, s, `cat /dev/shm/* 2>/dev/null; echo x > /dev/shm/left-${RUN}; true`);
      expect(out.stdout).not.toContain(SECRET);
      expect(existsSync(`/dev/shm/left-${RUN}`)).toBe(false);
    } finally {
      await execa('rm', ['-f', mine, `/dev/shm/left-${RUN}`]);
    }
  });
});

/* ------------------------------------------------------------------------------------------------ */
/* The syscall filter                                                                              */
/* ------------------------------------------------------------------------------------------------ */

/** A static x86_64 program that creat()s `marker` through another ABI (i386 int 0x80, or x32), then exits 0. */
function abiProgram(kind: 'i386' | 'x32', marker: string): Buffer {
  const base = 0x400000;
  const codeAt = 120;
  const le32 = (n: number): Buffer => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n >>> 0);
    return b;
  };
  const codeLen = 26;
  const where = base + codeAt + codeLen;
  const call =
    kind === 'i386'
      ? // mov eax, 8 (creat); mov ebx, path; mov ecx, 0644; int 0x80
        Buffer.concat([
          Buffer.from([0xb8]),
          le32(8),
          Buffer.from([0xbb]),
          le32(where),
          Buffer.from([0xb9]),
          le32(0o644),
          Buffer.from([0xcd, 0x80]),
        ])
      : // mov eax, x32|85 (creat); mov edi, path; mov esi, 0644; syscall
        Buffer.concat([
          Buffer.from([0xb8]),
          le32(0x40000055),
          Buffer.from([0xbf]),
          le32(where),
          Buffer.from([0xbe]),
          le32(0o644),
          Buffer.from([0x0f, 0x05]),
        ]);
  // mov eax, 60 (exit); xor edi, edi; syscall
  const code = Buffer.concat([call, Buffer.from([0xb8, 60, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05])]);
  const name = Buffer.from(`${marker}\0`);
  const total = codeAt + code.length + name.length;
  const h = Buffer.alloc(codeAt);
  Buffer.from([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1]).copy(h, 0);
  h.writeUInt16LE(2, 16);
  h.writeUInt16LE(0x3e, 18);
  h.writeUInt32LE(1, 20);
  h.writeBigUInt64LE(BigInt(base + codeAt), 24);
  h.writeBigUInt64LE(64n, 32);
  h.writeUInt16LE(64, 52);
  h.writeUInt16LE(56, 54);
  h.writeUInt16LE(1, 56);
  h.writeUInt32LE(1, 64); // PT_LOAD
  h.writeUInt32LE(5, 68); // R+X
  h.writeBigUInt64LE(BigInt(base), 80);
  h.writeBigUInt64LE(BigInt(base), 88);
  h.writeBigUInt64LE(BigInt(total), 96);
  h.writeBigUInt64LE(BigInt(total), 104);
  h.writeBigUInt64LE(0x1000n, 112);
  return Buffer.concat([h, code, name]);
}

describe.each(['root', 'user'] as const)('the syscall filter as %s', (owner) => {
  it('a call through the i386 ABI (int 0x80) is refused inside; the same program works outside', async () => {
    const s = await scene(owner);
    const outside = path.join(s.root, 'outside-i386');
    const inside = path.join(s.root, 'inside-i386');
    for (const [file, marker] of [
      [path.join(s.root, 'i386-out'), outside],
      [path.join(s.root, 'i386-in'), inside],
    ] as const) {
      await writeFile(file, abiProgram('i386', marker), { mode: 0o755 });
      await own(owner, file);
    }
    // Control: the kernel runs i386 calls for an unconfined process.
    await execa(path.join(s.root, 'i386-out'));
    expect(existsSync(outside)).toBe(true);
    const out = await confined(owner, s, '"$R/i386-in"; echo "rc=$?"');
    expect(existsSync(inside)).toBe(false);
    expect(out.stdout).toContain('rc=159'); // SIGSYS: the filter ends the process
  });

  it('a call through the x32 ABI is refused inside', async () => {
    const s = await scene(owner);
    const file = path.join(s.root, 'x32');
    await writeFile(file, abiProgram('x32', path.join(s.root, 'inside-x32')), { mode: 0o755 });
    await own(owner, file);
    const out = await confined(owner, s, '"$R/x32"; echo "rc=$?"');
    expect(existsSync(path.join(s.root, 'inside-x32'))).toBe(false);
    expect(out.stdout).toContain('rc=159');
  });

  it('a filter the command stacks itself (allow everything) does not lift capsule’s', async () => {
    const s = await scene(owner);
    const n = refusedNumbers();
    const out = await confined(
      owner,
      s,
      `perl -e '
my $f = pack("SCCL", 6, 0, 0, 0x7fff0000);
my $prog = pack("Sx6Q", 1, unpack("Q", pack("P", $f)));
syscall(317, 1, 0, $prog) == 0 or die "seccomp: $!\\n";
my $h = pack("II", 128, 0) . ("\\0" x 128); my $mid = pack("i", 0);
print syscall(${n.name_to_handle_at}, -100, $ENV{S}, $h, $mid, 0) == 0 ? "handle\\n" : "refused:$!\\n";
my $params = "\\0" x 120;
print syscall(${n.io_uring_setup}, 8, $params) >= 0 ? "uring\\n" : "refused:$!\\n";
print syscall(${n.unshare}, 0x10000000) == 0 ? "userns\\n" : "refused:$!\\n";
'`,
    );
    expect(out.stdout.trim().split('\n')).toEqual([
      'refused:Operation not permitted',
      'refused:Operation not permitted',
      'refused:Operation not permitted',
    ]);
  });
});

describe.each(['root', 'user'] as const)('the terminal as %s', (owner) => {
  /** Types "INJECTED\n" into its terminal with TIOCSTI, one character at a time. */
  const inject =
    'my @c = split //, "INJECTED\n"; for my $c (@c) { ioctl(STDOUT, 0x5412, $c) or (print STDERR "refused: $!\n"), last }';

  /** What the shell around capsule reads from the terminal once capsule is done (`script` gives a pty). */
  async function typedAfter(s: Scene, confinedRun: boolean): Promise<{ typed: string; refused?: string }> {
    const driver = path.join(s.root, `tty-${confinedRun}.mjs`);
    await writeFile(
      driver,
      confinedRun
        ? `const { HostProcesses } = await import(${JSON.stringify(path.join(REPO_ROOT, 'dist/runners/host/host-processes.js'))});
const r = await new HostProcesses().run({ file: 'perl', args: ['-e', ${JSON.stringify(inject)}], cwd: '/', env: { PATH: '/usr/bin:/bin' },
  output: 'inherit', outputBytes: 1 << 20, timeoutMs: 20000, protection: { readOnly: [], hidden: [] } });
if (!r.confined) throw new Error('not confined');`
        : `import { spawnSync } from 'node:child_process';
spawnSync('perl', ['-e', ${JSON.stringify(inject)}], { stdio: 'inherit' });`,
    );
    await own(owner, driver);
    const user =
      owner === 'user'
        ? ['setpriv', '--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups']
        : [];
    // The terminal's queue is read raw: `script` types an end-of-file (^D) into it when its own stdin ends,
    // which a line read would take for an empty line; raw, it is one more byte, dropped with the rest.
    const readQueue = 'stty -icanon -echo min 0 time 10; x=$(dd bs=256 count=1 2>/dev/null | tr -dc A-Z)';
    const argv = [...user, 'script', '-qec', `node ${driver}; ${readQueue}; echo "typed:[$x]"`, '/dev/null'];
    const r = await execa(argv[0] as string, argv.slice(1), { cwd: s.root, reject: false });
    const typed = /typed:\[([^\]]*)\]/.exec(r.stdout)?.[1];
    return {
      typed: typed ?? `no answer: ${r.stdout} ${r.stderr}`,
      refused: /refused: (.*)/.exec(r.stdout)?.[1],
    };
  }

  it('a command on capsule’s terminal types nothing into it (TIOCSTI); unconfined it does', async () => {
    const s = await scene(owner);
    // Control: where the kernel still allows it (dev.tty.legacy_tiocsti), an unconfined command types.
    // A kernel that refuses TIOCSTI to everyone says so (the control's own refusal); it never types in silence.
    const legacy = readFileSync('/proc/sys/dev/tty/legacy_tiocsti', 'utf8').trim() === '1';
    const control = await typedAfter(s, false);
    if (legacy && control.refused === undefined) expect(control.typed).toBe('INJECTED');
    const run = await typedAfter(s, true);
    expect(run.typed).toBe('');
    expect(run.refused).toBeDefined();
  });
});

/* ------------------------------------------------------------------------------------------------ */
/* Stops raced from inside                                                                          */
/* ------------------------------------------------------------------------------------------------ */

describe.each(['root', 'user'] as const)('a stop as %s', (owner) => {
  it('a run that tries to leave its cgroup, traps TERM and forks as fast as it can leaves no marker', async () => {
    const s = await scene(owner);
    const marker = path.join(s.root, 'after-stop');
    const out = await confined(
      owner,
      s,
      `trap '' TERM INT HUP
       for f in /sys/fs/cgroup/*/cgroup.procs /sys/fs/cgroup/*/tasks /sys/fs/cgroup/cgroup.procs; do
         (echo $$ > "$f") 2>/dev/null && echo "moved:$f"
       done
       (while :; do (sleep 2; : > "${marker}") & done) 2>/dev/null &
       (sleep 2; : > "${marker}") &
       sleep 2; : > "${marker}"`,
      { timeoutMs: 800 },
    );
    expect(out.timedOut).toBe(true);
    expect(out.stdout).not.toContain('moved:');
    await pastSleepOf(2); // as long as every sleep above, started after them
    expect(existsSync(marker)).toBe(false);
  });

  it('a stop that lands while the run is still being set up (deadlines of 1–40 ms) leaves no marker', async () => {
    const s = await scene(owner);
    const markers: string[] = [];
    for (const ms of [1, 2, 5, 10, 20, 40]) {
      const marker = path.join(s.root, `early-${ms}`);
      markers.push(marker);
      await confined(owner, s, `(sleep 1; : > "${marker}") & sleep 1; : > "${marker}"`, { timeoutMs: ms });
    }
    await pastSleepOf(1); // as long as every sleep above, started after them
    expect(markers.filter((m) => existsSync(m))).toEqual([]);
  });

  it('a prestarted call stopped by its deadline leaves no marker, and the next call is clean', async () => {
    const s = await scene(owner);
    const marker = path.join(s.root, 'after-stop-prestarted');
    const out = await confined(owner, s, '', {
      prestart: true,
      timeoutMs: 800,
      scripts: [
        'true',
        `trap '' TERM; (sleep 2; : > "${marker}") & setsid sh -c 'sleep 2; : > "${marker}"' & sleep 2; : > "${marker}"`,
        'ls /proc | grep -c "^[0-9]"',
      ],
    });
    await pastSleepOf(2);
    expect(existsSync(marker)).toBe(false);
    // The last call sees only itself (its pid 1, and ls/grep).
    expect(Number(out.stdout.trim())).toBeLessThanOrEqual(3);
  });
});

/* ------------------------------------------------------------------------------------------------ */
/* Without bubblewrap                                                                               */
/* ------------------------------------------------------------------------------------------------ */

describe('a machine without bubblewrap', () => {
  it('says the host process is unconfined, and why, and runs it unconfined (never claimed confined)', async () => {
    const { root } = await tempProject('capsule-rt-nobwrap-');
    const tools = path.join(root, 'bin');
    await mkdir(tools);
    await symlink('/bin/sh', path.join(tools, 'sh'));
    const c = probeHostConfinement({ toolDirs: [tools] });
    expect(c.pidNamespace).toBe(false);
    expect(c.noCapabilities).toBe(false);
    expect(c.readOnlyPaths).toBe(false);
    expect(describeConfinement(c)).toMatch(
      /^unconfined host process \(bubblewrap \(bwrap\) is not installed/,
    );
    const state = path.join(root, 'state');
    await writeFile(state, 'trusted\n');
    const r = await new HostProcesses(c).run({
      file: 'sh',
      args: ['-c', 'echo $$'],
      cwd: root,
      env: { PATH: '/usr/bin:/bin' },
      output: 'capture',
      outputBytes: 1024,
      protection: { readOnly: [state], hidden: [] },
    });
    expect(r.confined).toBe(false);
    expect(Number(r.stdout.trim())).not.toBe(1);
  });
});
