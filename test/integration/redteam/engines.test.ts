import { execFileSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempProject } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';

// Attacks on engine configuration (capsule.json "engines", CAPSULE_ENGINES) through `capsule engines`:
// an address that reads as one host but connects to another, tcp:// without TLS, and unix:// paths that
// are not sockets. Every listener is on loopback (127.0.0.1 and 127.0.0.2); each is judged by the
// connections it accepted. No address outside loopback is ever written here.

interface Counter {
  port: number;
  connections: number;
  close(): Promise<void>;
}

async function tcpListener(address: string): Promise<Counter> {
  const server = net.createServer((s) => {
    state.connections += 1;
    s.destroy();
  });
  const state: Counter = {
    port: 0,
    connections: 0,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
  await new Promise<void>((resolve) => server.listen(0, address, resolve));
  state.port = (server.address() as net.AddressInfo).port;
  return state;
}

async function engines(
  root: string,
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const r = await execa('node', [BUILT_CLI, 'engines', '--json'], {
    cwd: root,
    reject: false,
    env: { ...env, XDG_STATE_HOME: path.join(root, '.state') },
    timeout: 60_000,
  });
  return { code: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe('red team: engine addresses', () => {
  let shown: Counter;
  let real: Counter;
  let root: string;
  const tls = { ca: 'ca.pem', cert: 'cert.pem', key: 'key.pem' };

  beforeAll(async () => {
    shown = await tcpListener('127.0.0.1');
    real = await tcpListener('127.0.0.2');
    ({ root } = await tempProject('capsule-redteam-engines-'));
    await writeFile(path.join(root, 'capsule.json'), '{}\n');
    // Real PEM material, so a connection would get as far as the TLS handshake (a TCP connect).
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-subj',
        '/CN=capsule-test',
        '-days',
        '1',
        '-keyout',
        tls.key,
        '-out',
        tls.cert,
      ],
      { cwd: root, stdio: 'ignore' },
    );
    await writeFile(path.join(root, tls.ca), await readFile(path.join(root, tls.cert)));
  });

  afterAll(async () => {
    await Promise.all([shown.close(), real.close()]);
  });

  it('a tcp:// address whose userinfo reads as another host is refused before anything is contacted', async () => {
    for (const host of [
      `tcp://127.0.0.1:${shown.port}@127.0.0.2:${real.port}`,
      `tcp://127.0.0.1:${shown.port}:x@127.0.0.2:${real.port}`,
      `tcp://127.0.0.2:${real.port}\\@127.0.0.1:${shown.port}`,
      `tcp://127.0.0.2:${real.port}#127.0.0.1:${shown.port}`,
    ]) {
      for (const type of ['docker', 'swarm'] as const) {
        const entry = type === 'docker' ? { type, host, tls } : { type, manager: host, tls };
        const viaEnv = await engines(root, { CAPSULE_ENGINES: JSON.stringify({ e: entry }) });
        expect([real.connections, shown.connections], `${type} ${host}`).toEqual([0, 0]);
        expect(viaEnv.code, `${type} ${host}: ${viaEnv.stderr}`).toBe(64);
        await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ engines: { e: entry } }));
        const viaConfig = await engines(root, {});
        await writeFile(path.join(root, 'capsule.json'), '{}\n');
        expect(viaConfig.code, `${type} ${host}: ${viaConfig.stderr}`).toBe(78);
      }
    }
    expect(real.connections).toBe(0);
    expect(shown.connections).toBe(0);
  });

  it('tcp:// without tls, in any spelling, is refused and never contacted', async () => {
    for (const host of [
      `tcp://127.0.0.1:${shown.port}`,
      `TCP://127.0.0.1:${shown.port}`,
      `http://127.0.0.1:${shown.port}`,
      `tcp://127.0.0.1:${shown.port}/`,
    ]) {
      const r = await engines(root, {
        CAPSULE_ENGINES: JSON.stringify({ e: { type: 'docker', host } }),
      });
      expect(r.code, host).toBe(64);
    }
    expect(shown.connections).toBe(0);
  });

  it('a unix:// engine that is a regular file or a FIFO is reported unhealthy, not a crash or a hang', async () => {
    const file = path.join(root, 'not-a-socket');
    await writeFile(file, 'x');
    const fifo = path.join(root, 'a-fifo');
    execFileSync('mkfifo', [fifo]);
    const r = await engines(root, {
      CAPSULE_ENGINES: JSON.stringify({
        file: { type: 'docker', host: `unix://${file}` },
        fifo: { type: 'docker', host: `unix://${fifo}` },
        dir: { type: 'docker', host: `unix://${root}` },
      }),
    });
    expect(r.stderr).not.toMatch(/internal error/);
    const rows = JSON.parse(r.stdout) as Array<{ name: string; healthy: boolean; error?: string }>;
    expect(rows.map((x) => [x.name, x.healthy])).toEqual([
      ['file', false],
      ['fifo', false],
      ['dir', false],
    ]);
  });
});
