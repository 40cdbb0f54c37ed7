import { chmod, chown, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { probeHostConfinement } from '../../../src/runners/host/confinement.js';
import { refusedNumbers } from '../../../src/runners/seccomp.js';
import { tempProject } from '../../helpers/capability.js';
import { REPO_ROOT } from '../../helpers/cli.js';

/**
 * A confined host command holds no power over capsule's state or the host, whether capsule runs as root
 * or as an ordinary user: every route below tries to change a read-only file, read a hidden one, or reach
 * a kernel interface that starts a process outside the run. Judged by the protected bytes, by what the
 * hidden folder gave away, and by the host's own tunables, never by an error message.
 */

const confinement = probeHostConfinement();
const NOBODY = 65534;
const SECRET = `secret-${process.pid}-${Date.now()}`;

interface Scene {
  root: string;
  /** capsule's read-only state (a file in the project's .capsule/). */
  state: string;
  /** capsule's hidden per-user state, holding the key. */
  hidden: string;
}

async function scene(owner: 'root' | 'user'): Promise<Scene> {
  const { root } = await tempProject(`capsule-priv-${owner}-`);
  const project = path.join(root, 'proj');
  await mkdir(path.join(project, '.capsule'), { recursive: true });
  const state = path.join(project, '.capsule', 'policy.json');
  await writeFile(state, 'trusted\n');
  const hidden = path.join(root, 'home', 'state', 'capsule');
  await mkdir(path.join(hidden, 'secret'), { recursive: true });
  await writeFile(path.join(hidden, 'secret', 'key'), SECRET);
  if (owner === 'user') {
    await chmod(root, 0o755);
    for (const p of [root, project, path.join(project, '.capsule'), state, path.join(root, 'home')])
      await chown(p, NOBODY, NOBODY);
    for (const p of [path.join(root, 'home', 'state'), hidden, path.join(hidden, 'secret')])
      await chown(p, NOBODY, NOBODY);
    await chown(path.join(hidden, 'secret', 'key'), NOBODY, NOBODY);
  }
  return { root, state, hidden };
}

/** Runs `script` (sh) confined through the built module, as root or as an ordinary user; its stdout. */
async function confined(
  owner: 'root' | 'user',
  s: Scene,
  script: string,
  /** A command line capsule runs under (e.g. a private mount namespace with another name for the scene). */
  around: string[] = [],
): Promise<string> {
  const driver = path.join(s.root, `driver-${Math.random().toString(36).slice(2)}.mjs`);
  await writeFile(
    driver,
    `const { HostProcesses } = await import(${JSON.stringify(path.join(REPO_ROOT, 'dist/runners/host/host-processes.js'))});
const p = new HostProcesses();
const r = await p.run({ file: 'sh', args: ['-c', ${JSON.stringify(script)}], cwd: ${JSON.stringify(path.join(s.root, 'proj'))},
  env: { PATH: '/usr/bin:/bin', S: ${JSON.stringify(s.state)}, H: ${JSON.stringify(s.hidden)}, R: ${JSON.stringify(s.root)} },
  output: 'capture', outputBytes: 1 << 20, timeoutMs: 20000,
  protection: { readOnly: [${JSON.stringify(s.state)}], hidden: [${JSON.stringify(s.hidden)}] } });
process.stdout.write(JSON.stringify({ confined: r.confined, stdout: r.stdout, stderr: r.stderr }));
`,
  );
  if (owner === 'user') await chown(driver, NOBODY, NOBODY);
  const argv = [
    ...around,
    ...(owner === 'user'
      ? ['setpriv', '--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups']
      : []),
    'node',
    driver,
  ];
  const r = await execa(argv[0] as string, argv.slice(1), {
    cwd: s.root,
    reject: false,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', CAPSULE_TEST_SECRET: SECRET },
  });
  const out = JSON.parse(r.stdout) as { confined: boolean; stdout: string; stderr: string };
  expect(out.confined).toBe(true);
  return out.stdout + out.stderr;
}

/** Opens `$S` for writing through a file handle resolved on a writable mount of the same file system. */
const HANDLE_WRITE = `perl -e '
use POSIX;
my ($file, $dir) = @ARGV;
my $h = pack("II", 128, 0) . ("\\0" x 128);
my $mid = pack("i", 0);
syscall(${refusedNumbers().name_to_handle_at}, -100, $file, $h, $mid, 0) == 0 or die "name_to_handle_at: $!\\n";
my $m = POSIX::open($dir, O_RDONLY | O_DIRECTORY) // die "open dir: $!\\n";
my $fd = syscall(${refusedNumbers().open_by_handle_at}, $m, $h, O_RDWR);
$fd >= 0 or die "open_by_handle_at: $!\\n";
open(my $fh, "+<&=", $fd) or die "fdopen: $!\\n";
truncate($fh, 0); print $fh "forged\\n"; close($fh);
print "handle-wrote\\n";
' "$S" "$R"`;

/** Host tunables that start a program outside any run when written: the test restores what it finds. */
function hostTunables(): string[] {
  const found = ['/proc/sys/kernel/core_pattern', '/proc/sys/kernel/modprobe', '/sys/kernel/uevent_helper'];
  try {
    for (const c of readdirSync('/sys/fs/cgroup')) found.push(`/sys/fs/cgroup/${c}/release_agent`);
  } catch {
    // no cgroup v1
  }
  return found.filter((f) => {
    try {
      readFileSync(f);
      return true;
    } catch {
      return false;
    }
  });
}

const tunables = hostTunables();
const before = new Map(tunables.map((f) => [f, readFileSync(f, 'utf8')]));
afterAll(() => {
  // Should an attack ever get through, the machine gets its values back.
  for (const [f, v] of before) {
    if (readFileSync(f, 'utf8') !== v) writeFileSync(f, v.trim() === '' ? '\n' : v);
  }
});

it('the probe finds every guarantee held on this machine (the isolation report names nothing missing)', () => {
  expect(confinement.missing).toEqual([]);
  expect(confinement).toMatchObject({
    noCapabilities: true,
    minimalDev: true,
    kernelReadOnly: true,
    syscallFilter: true,
    readOnlyPaths: true,
    hiddenPaths: true,
    stop: 'freeze-then-kill',
  });
});

describe.each(['root', 'user'] as const)(
  'a confined host command as %s holds no power over capsule',
  (owner) => {
    it('holds no capability, no new privileges, and the syscall filter', async () => {
      const s = await scene(owner);
      const out = await confined(
        owner,
        s,
        'grep -E "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):" /proc/self/status',
      );
      for (const k of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
        expect(out).toMatch(new RegExp(`${k}:\\s+0000000000000000`));
      expect(out).toMatch(/NoNewPrivs:\s+1/);
      expect(out).toMatch(/Seccomp:\s+2/);
    });

    it('a file handle through a writable mount does not open the read-only state for writing', async () => {
      const s = await scene(owner);
      const out = await confined(owner, s, HANDLE_WRITE);
      expect(out).not.toContain('handle-wrote');
      expect(await readFile(s.state, 'utf8')).toBe('trusted\n');
    });

    it('cannot remount, unmount, re-bind or re-enter its mounts', async () => {
      const s = await scene(owner);
      const script = [
        'mount -o remount,rw "$S" 2>/dev/null; mount -o remount,bind,rw "$S" 2>/dev/null',
        'umount "$S" 2>/dev/null; umount -l "$S" 2>/dev/null; echo forged > "$S" 2>/dev/null',
        // A namespace of its own would give back every capability inside it.
        'unshare -Urm sh -c \'umount -l "$S"; echo forged > "$S"\' 2>/dev/null',
        'unshare -U true 2>/dev/null && echo userns-made',
        // Through a descriptor: the same file opened for writing by its /proc name.
        'exec 9<"$S"; echo forged > /proc/self/fd/9 2>/dev/null',
        'echo forged 2>/dev/null >"/proc/$$/root$S"',
        // Rename the folder holding the state away, then put a forged one where it was.
        'mv "$R/proj/.capsule" "$R/proj/moved" 2>/dev/null; mv "$R/proj" "$R/proj-moved" 2>/dev/null',
        'mkdir -p "$R/proj/.capsule" 2>/dev/null; echo forged > "$S" 2>/dev/null',
        'true',
      ].join('\n');
      const out = await confined(owner, s, script);
      expect(out).not.toContain('userns-made');
      expect(await readFile(s.state, 'utf8')).toBe('trusted\n');
      expect((await readdir(s.root)).filter((n) => n.includes('moved'))).toEqual([]);
      expect((await readdir(path.join(s.root, 'proj'))).filter((n) => n.includes('moved'))).toEqual([]);
    });

    it('sees nothing of the hidden state, by any name', async () => {
      const s = await scene(owner);
      const script = [
        'ls -la "$H" "$H/secret"; cat "$H/secret/key"',
        'cat "/proc/self/root$H/secret/key"; find "$R/home" -type f -exec cat {} +',
        // capsule's own environment holds the secret too: no process of the host is visible.
        'cat /proc/[0-9]*/environ | tr "\\0" "\\n" | grep CAPSULE_TEST_SECRET',
        'ls /proc | grep -c "^[0-9]"',
        'true',
      ].join('\n');
      const out = await confined(owner, s, script);
      expect(out).not.toContain(SECRET);
      // Nothing can be written into it either: the tmpfs over it is read-only.
      await confined(owner, s, 'echo forged > "$H/forged" 2>/dev/null; mkdir "$H/secret2" 2>/dev/null; true');
      expect((await readdir(s.hidden)).sort()).toEqual(['secret']);
    });

    it('no raw device: /dev is minimal and a block device cannot be made', async () => {
      const s = await scene(owner);
      const script = [
        'ls -A /dev | tr "\\n" " "; echo',
        // Make the host's disks by number (read-only attempt) and read their first byte.
        'for d in /sys/block/*/dev; do n=$(cat "$d"); mknod "$R/blk" b "${n%:*}" "${n#*:}" 2>/dev/null && head -c 16 "$R/blk" 2>/dev/null | od -c | head -1 | grep -q . && echo "read-raw $d"; rm -f "$R/blk"; done',
        'true',
      ].join('\n');
      const out = await confined(owner, s, script);
      const devices = (out.split('\n')[0] ?? '').trim().split(' ');
      const minimal = [
        'core',
        'fd',
        'full',
        'null',
        'ptmx',
        'pts',
        'random',
        'shm',
        'stderr',
        'stdin',
        'stdout',
        'tty',
        'urandom',
        'zero',
      ];
      expect(devices.filter((d) => !minimal.includes(d))).toEqual([]);
      expect(out).not.toContain('read-raw');
    });

    it('cannot write a kernel tunable that starts a program outside the run (core_pattern, release_agent, …)', async () => {
      const s = await scene(owner);
      const script = tunables.map((f) => `echo "|$R/evil" > ${f} 2>/dev/null`).join('\n') + '\ntrue';
      await confined(owner, s, script);
      for (const f of tunables) expect(readFileSync(f, 'utf8')).toBe(before.get(f));
      expect(tunables.length).toBeGreaterThan(0);
    });

    it('each call the filter refuses fails inside (and only inside)', async () => {
      const s = await scene(owner);
      const numbers = refusedNumbers();
      // Called with harmless arguments: refused, the call never reaches the kernel's own checks (EPERM = 1).
      const probe = [
        'keyctl',
        'add_key',
        'bpf',
        'perf_event_open',
        'userfaultfd',
        'unshare',
        'setns',
        'open_tree',
        'fsopen',
      ]
        .map((n) => `$! = 0; syscall(${numbers[n]}, 0, 0, 0, 0, 0); print "${n}=", $!+0, "\\n";`)
        .join(' ');
      const out = await confined(owner, s, `perl -e '${probe}'`);
      for (const n of [
        'keyctl',
        'add_key',
        'bpf',
        'perf_event_open',
        'userfaultfd',
        'unshare',
        'setns',
        'open_tree',
        'fsopen',
      ])
        expect(out).toContain(`${n}=1\n`);
    });
  },
);

describe('protected under every name the mount table gives it', () => {
  it('a second mount of a parent folder is protected too (read-only stays read-only, hidden stays hidden)', async () => {
    const s = await scene('root');
    const alias = path.join(path.dirname(s.root), `${path.basename(s.root)}-alias`);
    await mkdir(alias);
    // capsule runs in a mount namespace where the whole scene is also mounted at `alias`.
    const around = [
      'unshare',
      '--mount',
      '--propagation',
      'private',
      'sh',
      '-c',
      `mount --bind "$0" "$1" && shift && exec "$@"`,
      s.root,
      alias,
    ];
    const rel = (p: string): string => path.join(alias, path.relative(s.root, p));
    const out = await confined(
      'root',
      s,
      [
        `ls "${alias}/proj/.capsule" >/dev/null && echo alias-visible`,
        `echo forged > "${rel(s.state)}" 2>/dev/null`,
        `cat "${rel(path.join(s.hidden, 'secret', 'key'))}" 2>/dev/null`,
        'true',
      ].join('\n'),
      around,
    );
    expect(out).toContain('alias-visible');
    expect(out).not.toContain(SECRET);
    expect(await readFile(s.state, 'utf8')).toBe('trusted\n');
  });
});

describe('controls: the same attacks work unconfined', () => {
  it('the file-handle route rewrites a read-only bind mount when the capability is held', async () => {
    const s = await scene('root');
    // Unconfined, as capsule's own root: a read-only bind in a private mount namespace, written by handle.
    const r = await execa(
      'unshare',
      [
        '--mount',
        'sh',
        '-c',
        `mount --bind -o ro "$S" "$S" && { echo x > "$S" 2>/dev/null || echo ro-held; } && ${HANDLE_WRITE}`,
      ],
      { env: { PATH: '/usr/bin:/bin', S: s.state, R: s.root }, reject: false },
    );
    expect(r.stdout).toContain('ro-held');
    expect(r.stdout).toContain('handle-wrote');
    expect(await readFile(s.state, 'utf8')).toBe('forged\n');
  });
});
