import { existsSync } from 'node:fs';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { projectConfigSchema } from '../../../../src/project/project-config.js';
import { policyViewOf } from '../../../../src/permissions/policy-diff.js';
import { StateKey } from '../../../../src/project/state-key.js';
import { PolicySnapshotStore } from '../../../../src/permissions/policy-snapshot.js';
import { tempProject, writeCapability } from '../../../helpers/capability.js';
import { BUILT_CLI, cli } from '../../../helpers/cli.js';
import { created } from './helpers.js';

// Attack: a repository's capsule.json names (or changes) an engine. An engine receives every docker call's
// files and input, so a hostile file could send them to the attacker's daemon. The engines a person has not
// confirmed must never be reached: judged by a listener that records every connection to its socket, and by
// the real engines' own event logs.

const ENGINES_ROOT = process.env['CAPSULE_ENGINES_ROOT'] ?? '/var/lib/capsule-engines';

/** A unix socket that counts connections (standing in for an attacker's daemon) and answers nothing. */
async function listener(): Promise<{ host: string; connections: () => number; close: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'capsule-evil-engine-'));
  const socket = path.join(dir, 'docker.sock');
  let count = 0;
  const server = net.createServer((c) => {
    count += 1;
    c.destroy();
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  return {
    host: `unix://${socket}`,
    connections: () => count,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** `capsule reload` in a pseudo-terminal, a person typing `answer`. */
async function reloadInTerminal(root: string, env: Record<string, string>, answer: string) {
  const r = await execa('script', ['-qec', `node ${BUILT_CLI} reload`, '/dev/null'], {
    cwd: root,
    env: { ...process.env, ...env },
    reject: false,
    input: `${answer}\n`,
    timeout: 60_000,
  });
  return { code: r.exitCode ?? -1, output: r.stdout };
}

describe('engines are part of the confirmed policy', () => {
  let hosts: Record<string, string>;
  const closers: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the CLI integration tests');
    const index = JSON.parse(await readFile(path.join(ENGINES_ROOT, 'engines.json'), 'utf8')) as {
      engines: Record<string, { host: string }>;
    };
    hosts = Object.fromEntries(Object.entries(index.engines).map(([n, e]) => [n, e.host]));
  });

  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
  });

  async function project(capability: string, engines: Record<string, unknown>) {
    const { root, capRoot } = await tempProject('capsule-engine-policy-');
    await writeCapability(
      capRoot,
      capability,
      { environment: 'docker', docker: { image: 'capsule/busybox:1' } },
      { 'run.sh': 'echo "ran $(cat)"\n' },
    );
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-engine-policy-state-'));
    const env = { ...process.env, CAPSULE_STATE_DIR: state } as Record<string, string>;
    delete env['CAPSULE_ENGINES'];
    delete env['CAPSULE_ENGINE'];
    const write = (e: Record<string, unknown>) =>
      writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1, engines: e }));
    await write(engines);
    return { root, env, state, write };
  }

  it('a fresh checkout: engines in the repository file are not used, not even asked, until a person confirms them', async () => {
    const evil = await listener();
    closers.push(evil.close);
    const { root, env } = await project('fresh-evil', { evil: { type: 'docker', host: evil.host } });
    const grant = ['--grant', 'run_capability:fresh-evil', '--no-prompt', '--input', '{"v":"x"}'];
    const run = await cli(['run', 'fresh-evil', ...grant], { cwd: root, env });
    expect(run.code, run.stderr).toBe(0);
    // The call runs on the person's own engine (DOCKER_HOST or the local socket), as with no engines.
    expect(run).toMatchObject({ stdout: 'ran {"v":"x"}\n', code: 0 });
    expect(run.stderr).toMatch(/capsule reload/);
    expect(await cli(['run', 'fresh-evil', '--engine', 'evil', ...grant], { cwd: root, env })).toMatchObject({
      code: 64,
      stdout: '',
    });
    expect((await cli(['engines', '--json'], { cwd: root, env })).stdout).not.toContain('evil');
    expect(evil.connections()).toBe(0);
    // A person says yes at `capsule reload`: from then on the engine is used (the listener is reached).
    expect((await reloadInTerminal(root, env, 'y')).code).toBe(0);
    await cli(['run', 'fresh-evil', ...grant], { cwd: root, env });
    expect(evil.connections()).toBeGreaterThan(0);
  });

  it('after a confirmation, a changed host and an added engine are not reached; the confirmed engine still runs the call', async () => {
    const evil = await listener();
    closers.push(evil.close);
    const confirmed = { a: { type: 'docker', host: hosts['pool-a'] } };
    const { root, env, state, write } = await project('changed-evil', confirmed);
    // A person confirmed `a` on pool-a earlier (what capsule reload records on a yes).
    await new PolicySnapshotStore({ stateDir: state, key: new StateKey({ stateDir: state }) }).write(
      root,
      policyViewOf(projectConfigSchema.parse({ schemaVersion: 1, engines: confirmed })),
      'capsule reload',
    );
    const since = Math.floor(Date.now() / 1000) - 1;
    const grant = ['--grant', 'run_capability:changed-evil', '--no-prompt', '--input', '{"v":"y"}'];
    for (const engines of [
      { ...confirmed, evil: { type: 'docker', host: evil.host } },
      { a: { type: 'docker', host: evil.host } },
    ]) {
      await write(engines);
      const run = await cli(['run', 'changed-evil', ...grant], { cwd: root, env });
      expect(run.stderr).toMatch(/capsule reload/);
      expect(evil.connections()).toBe(0);
      if ('evil' in engines) {
        expect(run).toMatchObject({ stdout: 'ran {"v":"y"}\n', code: 0 });
        const picked = await cli(['run', 'changed-evil', '--engine', 'evil', ...grant], { cwd: root, env });
        expect(picked.code).toBe(64);
      }
      expect((await cli(['engines', '--json'], { cwd: root, env })).stdout).not.toContain(evil.host);
      expect(evil.connections()).toBe(0);
    }
    // The one call that ran went to the confirmed engine: pool-a's own event log shows it.
    expect(await created(hosts['pool-a'] as string, 'changed-evil', since)).toBeGreaterThanOrEqual(1);
    // Shown to a person as a difference; refused, still not reached.
    const refused = await reloadInTerminal(root, env, 'n');
    expect(refused.output).toContain(`~ engine a: docker ${evil.host}`);
    await cli(['run', 'changed-evil', ...grant], { cwd: root, env });
    expect(evil.connections()).toBe(0);
  });

  it('removing an engine applies at once (no confirmation needed to use fewer engines)', async () => {
    const both = {
      a: { type: 'docker', host: hosts['pool-a'] },
      b: { type: 'docker', host: hosts['pool-b'] },
    };
    const { root, env, state, write } = await project('removed-b', both);
    await new PolicySnapshotStore({ stateDir: state, key: new StateKey({ stateDir: state }) }).write(
      root,
      policyViewOf(projectConfigSchema.parse({ schemaVersion: 1, engines: both })),
      'capsule reload',
    );
    await write({ a: both.a });
    const since = Math.floor(Date.now() / 1000) - 1;
    const grant = ['--grant', 'run_capability:removed-b', '--no-prompt', '--input', '{"v":"z"}'];
    const pickedB = await cli(['run', 'removed-b', '--engine', 'b', ...grant], { cwd: root, env });
    expect(pickedB, pickedB.stderr).toMatchObject({ code: 64 });
    const onA = await cli(['run', 'removed-b', '--engine', 'a', ...grant], { cwd: root, env });
    expect(onA, onA.stderr).toMatchObject({ code: 0, stdout: 'ran {"v":"z"}\n' });
    expect(await created(hosts['pool-b'] as string, 'removed-b', since)).toBe(0);
    expect(await created(hosts['pool-a'] as string, 'removed-b', since)).toBe(1);
  });

  it('variants: a swarm manager, an engine named like the default, a file that only re-orders engines', async () => {
    const evil = await listener();
    closers.push(evil.close);
    for (const engines of [
      { evil: { type: 'swarm', manager: evil.host } },
      { default: { type: 'docker', host: evil.host } },
    ]) {
      const { root, env } = await project('variant-evil', engines);
      const name = Object.keys(engines)[0] as string;
      const r = await cli(
        ['run', 'variant-evil', '--engine', name, '--grant', 'run_capability:variant-evil'],
        {
          cwd: root,
          env,
        },
      );
      expect(r.code).toBe(64);
      await cli(['engines', '--json'], { cwd: root, env });
    }
    expect(evil.connections()).toBe(0);
    // The same engines in another key order are the confirmed ones (no difference, nothing pending).
    const a = { type: 'docker', host: hosts['pool-a'] };
    const b = { type: 'docker', host: hosts['pool-b'] };
    const { root, env, state, write } = await project('reordered', { a, b });
    await new PolicySnapshotStore({ stateDir: state, key: new StateKey({ stateDir: state }) }).write(
      root,
      policyViewOf(projectConfigSchema.parse({ schemaVersion: 1, engines: { a, b } })),
      'capsule reload',
    );
    await write({ b: { host: b.host, type: 'docker' }, a: { host: a.host, type: 'docker' } });
    const listed = await cli(['engines', '--json'], { cwd: root, env });
    expect(listed.stderr).not.toMatch(/capsule reload/);
    expect((JSON.parse(listed.stdout) as Array<{ name: string }>).map((e) => e.name).sort()).toEqual([
      'a',
      'b',
    ]);
  });

  it("CAPSULE_ENGINES is the person's own environment (like --grant): its engines are used without a confirmation", async () => {
    const mine = await listener();
    closers.push(mine.close);
    const { root, env } = await project('env-engine', {});
    const r = await cli(['run', 'env-engine', '--grant', 'run_capability:env-engine', '--no-prompt'], {
      cwd: root,
      env: { ...env, CAPSULE_ENGINES: JSON.stringify({ mine: { type: 'docker', host: mine.host } }) },
    });
    expect(r.code).not.toBe(0);
    expect(mine.connections()).toBeGreaterThan(0);
    // The error names the engine and where it answers (not the default socket).
    expect(r.stderr).toContain('engine mine');
    expect(r.stderr).toContain(mine.host);
  });
});
