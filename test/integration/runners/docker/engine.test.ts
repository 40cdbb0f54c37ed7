import { spawnSync } from 'node:child_process';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutputDemuxer } from '../../../../src/runners/docker/demux.js';
import type { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import type { ImageBuilder } from '../../../../src/runners/docker/images.js';
import { currentHost, ownerLabels } from '../../../../src/runners/docker/labels.js';
import { dockerForTests } from './helpers.js';

// The walking skeleton's proof that the engine path works: a trivial container, through dockerode,
// on an image built locally from runtimes/docker (no registry).
describe('docker engine (walking skeleton)', () => {
  let engine: DockerodeEngine;
  let builder: ImageBuilder;
  const created: string[] = [];

  beforeAll(async () => {
    ({ engine, builder } = await dockerForTests());
    await builder.ensure('capsule/busybox:1');
  });

  afterAll(async () => {
    await Promise.all(created.map((id) => engine.remove(id)));
  });

  it('runs a trivial container on the locally built busybox image, with stdin in and stdout/exit code out', async () => {
    const id = await engine.createContainer({
      image: 'capsule/busybox:1',
      cmd: ['/bin/sh', '-c', 'read line; echo "got:$line"; echo oops >&2; exit 3'],
      workingDir: '/tmp',
      user: '65534:65534',
      env: [],
      // Owner labels: reaped by the next runner if this test process dies before its cleanup.
      labels: {
        ...ownerLabels({ host: currentHost(), pid: process.pid, instance: 'engine-test' }),
        'capsule.test': 'engine',
      },
      openStdin: true,
      runtime: 'runc',
      networkDisabled: true,
      networkMode: 'none',
      pidMode: '',
      ipcMode: 'private',
      privileged: false,
      readonlyRootfs: true,
      capDrop: ['ALL'],
      capAdd: [],
      securityOpt: ['no-new-privileges'],
      memoryBytes: 64 * 1024 * 1024,
      memorySwapBytes: 64 * 1024 * 1024,
      pidsLimit: 16,
      nanoCpus: 500_000_000,
      ulimits: [],
      tmpfs: {},
      mounts: [],
      logDriver: 'none',
    });
    created.push(id);
    const stream = await engine.attach(id);
    const demux = new OutputDemuxer(1024, () => {});
    const ended = new Promise<void>((resolve) => {
      stream.on('data', (c: Buffer) => demux.push(c));
      stream.on('end', resolve);
      stream.on('close', resolve);
    });
    await engine.start(id);
    const stdin = new PassThrough();
    stdin.pipe(stream);
    stdin.end('hello\n');
    const code = await engine.wait(id);
    await ended;
    expect(code).toBe(3);
    expect(demux.stdout()).toBe('got:hello\n');
    expect(demux.stderr()).toBe('oops\n');
    expect((await engine.inspect(id)).oomKilled).toBe(false);
  });

  it('scripts/provision-docker.sh is idempotent when the engine already runs: it installs and starts nothing', () => {
    const script = fileURLToPath(new URL('../../../../scripts/provision-docker.sh', import.meta.url));
    const r = spawnSync('bash', [script], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/engine answers/);
    // Judged by what it did (nothing installed, no dockerd started), not by how long it took.
    expect(r.stderr).not.toMatch(/installing|starting dockerd/);
  });

  it('has the image labelled as capsule-managed and reports the engine version', async () => {
    expect(await engine.imageExists('capsule/busybox:1')).toBe(true);
    const info = await engine.info();
    expect(info.serverVersion).toMatch(/\d+\.\d+/);
    expect(info.runtimes).toContain('runc');
  });
});
