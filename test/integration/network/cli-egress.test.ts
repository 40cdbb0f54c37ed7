import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempProject, writeManifest } from '../../helpers/capability.js';
import { cli } from '../../helpers/cli.js';
import { listen, type Listener } from './loopback.js';

// End to end through the built CLI (the real composition root, the system resolver): a component with
// one IP-literal host granted reaches that listener only, and every request lands in the project's
// hash-chained audit log.
const EXAMPLE = fileURLToPath(new URL('../../../capabilities/fetch-wasm/', import.meta.url));

describe('capsule run with grants.network (wasm, built CLI)', () => {
  let granted: Listener;
  let other: Listener;

  beforeAll(async () => {
    granted = await listen((_req, res) => res.end('granted'));
    other = await listen((_req, res) => res.end('other'));
  });
  afterAll(async () => Promise.all([granted.close(), other.close()]).then(() => undefined));

  it('reaches the granted host, not another port; both requests audited; the log verifies', async () => {
    const { root, capRoot } = await tempProject('capsule-cli-egress-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const dir = path.join(capRoot, 'fetcher');
    await mkdir(dir);
    const manifest = JSON.parse(await readFile(path.join(EXAMPLE, 'capability.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    await writeManifest(dir, {
      ...manifest,
      name: 'fetcher',
      grants: { network: [{ host: '127.0.0.1', ports: [granted.port] }] },
    });
    for (const f of ['fetch.js', 'fetch.wasm'])
      await writeFile(path.join(dir, f), await readFile(path.join(EXAMPLE, f)));

    const show = await cli(['show', 'fetcher'], { cwd: root });
    expect(show.stdout).toContain(`network 127.0.0.1:${granted.port}`);
    expect(show.stdout).toMatch(new RegExp(`isolation: .*127\\.0\\.0\\.1:${granted.port}`));

    const ok = await cli(
      [
        'run',
        'fetcher',
        '--input',
        JSON.stringify({ url: `http://127.0.0.1:${granted.port}/` }),
        '--grant',
        'run_capability:fetcher',
      ],
      { cwd: root },
    );
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('"body":"granted"');
    const refused = await cli(
      [
        'run',
        'fetcher',
        '--input',
        JSON.stringify({ url: `http://127.0.0.1:${other.port}/` }),
        '--grant',
        'run_capability:fetcher',
      ],
      { cwd: root },
    );
    expect(refused.stdout).toContain('capsule refused GET 127.0.0.1');
    expect(other.connections).toBe(0);

    const log = (await readFile(path.join(root, '.capsule', 'audit.jsonl'), 'utf8'))
      .trimEnd()
      .split('\n')
      .map(
        (l) =>
          JSON.parse(l) as { tool: string; decision: string; network?: { port: number; bytesIn: number } },
      );
    const network = log.filter((r) => r.tool === 'network');
    expect(network.map((r) => [r.decision, r.network?.port])).toEqual([
      ['allow', granted.port],
      ['deny', other.port],
    ]);
    expect(network[0]?.network?.bytesIn).toBe('granted'.length);
    const verify = await cli(['audit', 'verify'], { cwd: root });
    expect(verify.code).toBe(0);
  });
});
