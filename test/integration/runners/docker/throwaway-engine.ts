import { execa } from 'execa';
import { spawn } from 'node:child_process';
import { mkdir, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import Docker from 'dockerode';

/**
 * A dockerd of a test's own, started the way scripts/extra-engines.sh starts its engines: in a network namespace
 * of its own, its own data root, exec root, pidfile, unix socket and daemon.json, `--bridge=none
 * --iptables=false`, capsule/busybox:1 copied in from the main engine. A test may stop, restart (with other
 * flags, at the same socket and data root) and finally destroy it; no other test knows it.
 */
export interface ThrowawayEngine {
  name: string;
  dir: string;
  /** Its unix socket path. */
  socket: string;
  pid(): number;
  /** Stop the daemon (SIGTERM, then SIGKILL; its containerd too). */
  stop(): Promise<void>;
  /** Stop the daemon (SIGTERM, then SIGKILL) and start it again at the same socket and data root. */
  restart(options: EngineOptions): Promise<void>;
  /** Stop it, remove its folder and its namespace. */
  destroy(): Promise<void>;
  /** What the daemon's own event log holds about containers created since `sinceSec` (unix seconds). */
  createdSince(
    sinceSec: number,
    label: string,
  ): Promise<Array<{ id: string; labels: Record<string, string> }>>;
}

export interface EngineOptions {
  /**
   * Weaker whatever capsule asks, as scripts/extra-engines.sh's `weak` engine: the `runc` first on the daemon's
   * PATH drops no-new-privileges and the seccomp filter from every container's OCI config.
   */
  weak?: boolean;
}

const IMAGE = 'capsule/busybox:1';

/** The weak runc wrapper (the same edit as scripts/extra-engines.sh's). */
async function writeWeakRunc(bin: string): Promise<void> {
  const real = (await execa('sh', ['-c', 'command -v runc'])).stdout.trim();
  await mkdir(bin, { recursive: true });
  const edit =
    'const fs = require("node:fs"); const f = process.argv[1]; const c = JSON.parse(fs.readFileSync(f, "utf8")); c.process.noNewPrivileges = false; delete c.linux.seccomp; fs.writeFileSync(f, JSON.stringify(c));';
  await writeFile(
    path.join(bin, 'runc'),
    [
      '#!/bin/sh',
      'prev=',
      'for a in "$@"; do',
      '  case "$prev" in --bundle|-b) bundle=$a ;; esac',
      '  prev=$a',
      'done',
      `if [ -n "\${bundle:-}" ] && [ -f "$bundle/config.json" ]; then node -e '${edit}' "$bundle/config.json"; fi`,
      `exec ${real} "$@"`,
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
}

/** The containerd processes of the dockerd in `dir` (found by their config path under its exec root). */
async function containerdsOf(dir: string): Promise<number[]> {
  const config = `${dir}/exec/containerd/containerd.toml`;
  const out: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.split('\0').includes(config)) out.push(Number(entry));
  }
  return out;
}

export async function startThrowawayEngine(
  name: string,
  first: EngineOptions = {},
): Promise<ThrowawayEngine> {
  // Short: containerd's socket lives under the exec root and a unix socket path has at most 107 bytes.
  const dir = `/tmp/cpe-${process.pid}-${name}`;
  const ns = `cpe-${process.pid}-${name}`;
  const socket = path.join(dir, 'docker.sock');
  await mkdir(path.join(dir, 'data'), { recursive: true });
  await mkdir(path.join(dir, 'exec'), { recursive: true });
  await writeFile(path.join(dir, 'daemon.json'), '{}\n');
  await execa('ip', ['netns', 'add', ns]);
  await execa('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
  let pid = 0;

  await writeWeakRunc(path.join(dir, 'weak-bin'));

  const start = async (options: EngineOptions): Promise<void> => {
    const log = await open(path.join(dir, 'dockerd.log'), 'a');
    const PATH = `${options.weak === true ? `${path.join(dir, 'weak-bin')}:` : ''}${process.env['PATH'] ?? ''}`;
    const child = spawn(
      'nsenter',
      [
        `--net=/run/netns/${ns}`,
        'dockerd',
        '--config-file',
        path.join(dir, 'daemon.json'),
        '--data-root',
        path.join(dir, 'data'),
        '--exec-root',
        path.join(dir, 'exec'),
        '--pidfile',
        path.join(dir, 'dockerd.pid'),
        '-H',
        `unix://${socket}`,
        '--bridge=none',
        '--iptables=false',
        '--ip-masq=false',
      ],
      { detached: true, stdio: ['ignore', log.fd, log.fd], env: { ...process.env, PATH } },
    );
    child.unref();
    await log.close();
    pid = child.pid ?? 0;
    const docker = new Docker({ socketPath: socket });
    for (let i = 0; i < 240; i++) {
      if (
        await docker.ping().then(
          () => true,
          () => false,
        )
      )
        return;
      await delay(250);
    }
    const text = await readFile(path.join(dir, 'dockerd.log'), 'utf8');
    throw new Error(`${name}: dockerd did not answer within 60 s: ${text.split('\n').slice(-8).join('\n')}`);
  };

  const stop = async (): Promise<void> => {
    if (pid === 0) return;
    const alive = (): boolean => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    try {
      process.kill(pid, 'SIGCONT');
      process.kill(pid, 'SIGTERM');
    } catch {
      // gone already
    }
    for (let i = 0; i < 80 && alive(); i++) await delay(250);
    if (alive()) process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 40 && alive(); i++) await delay(250);
    pid = 0;
    // The containerd a killed dockerd started outlives it and holds the engine's metadata lock: end it too.
    const stale = await containerdsOf(dir);
    for (const p of stale) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    for (let i = 0; i < 40 && (await containerdsOf(dir)).length > 0; i++) await delay(250);
  };

  const destroy = async (): Promise<void> => {
    await stop();
    await execa('ip', ['netns', 'del', ns], { reject: false });
    // dockerd bind-mounts its data root onto itself; a daemon that died early leaves that mount behind.
    await execa('umount', ['-l', path.join(dir, 'data')], { reject: false });
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await start(first);
    // The sandbox image, from the main engine.
    const saved = execa('docker', ['save', IMAGE]);
    const loaded = execa('docker', ['-H', `unix://${socket}`, 'load', '-q']);
    saved.stdout?.pipe(loaded.stdin as NodeJS.WritableStream);
    await Promise.all([saved, loaded]);
  } catch (err) {
    await destroy();
    throw err;
  }

  return {
    name,
    dir,
    socket,
    pid: () => pid,
    stop,
    async restart(next: EngineOptions): Promise<void> {
      await stop();
      await start(next);
    },
    destroy,
    async createdSince(sinceSec: number, label: string) {
      const docker = new Docker({ socketPath: socket });
      const stream = (await docker.getEvents({
        since: sinceSec,
        until: Math.ceil(Date.now() / 1000) + 1,
        filters: { type: ['container'], event: ['create'], label: [label] },
      })) as NodeJS.ReadableStream;
      let text = '';
      for await (const chunk of stream as AsyncIterable<Buffer>) text += chunk.toString('utf8');
      return text
        .split('\n')
        .filter((l) => l.trim() !== '')
        .map((l) => JSON.parse(l) as { id: string; Actor: { Attributes: Record<string, string> } })
        .map((e) => ({ id: e.id, labels: e.Actor.Attributes }));
    },
  };
}
