import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Executor } from '../../../src/executor/executor.js';
import { hashFiles } from '../../../src/manifest/hash.js';
import { MemoryAuditSink } from '../../../src/permissions/audit/memory-sink.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { createScriptedPrompter } from '../../../src/permissions/prompter.js';
import { Registry } from '../../../src/registry/registry.js';
import { StateKey } from '../../../src/project/state-key.js';
import { ScanIndex } from '../../../src/registry/scan-index.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { cli } from '../../helpers/cli.js';
import { settledFor } from '../../helpers/eventually.js';

async function indexed(): Promise<{
  root: string;
  capRoot: string;
  indexFile: string;
  key: StateKey;
  registry: () => Registry;
}> {
  const { root, capRoot } = await tempProject('capsule-scan-index-');
  const state = await mkdtemp(path.join(tmpdir(), 'capsule-scan-index-state-'));
  const indexFile = path.join(state, 'registry-index', 'p.json');
  const key = new StateKey({ stateDir: state });
  // settleMs 0: remember folders at once (the default waits for files to stop changing).
  const registry = (): Registry =>
    new Registry({
      roots: ['capabilities'],
      projectRoot: root,
      protectedPaths: [path.join(root, 'capsule.json'), path.join(root, '.capsule')],
      index: new ScanIndex(indexFile, { key, settleMs: 0 }),
    });
  return { root, capRoot, indexFile, key, registry };
}

/**
 * What someone who can write the per-user state does: record a hash of their choice for a folder
 * (its MAC kept; with `key`, signed as capsule would: the control that shows the MAC is what refuses it).
 */
async function tamper(indexFile: string, dir: string, contentHash: string, key?: StateKey): Promise<void> {
  const doc = JSON.parse(await readFile(indexFile, 'utf8')) as {
    folders: Record<string, { files: string[]; stamps: string[]; contentHash: string; mac: string }>;
  };
  const entry = doc.folders[dir];
  if (entry === undefined) throw new Error(`no entry for ${dir}`);
  entry.contentHash = contentHash;
  if (key !== undefined) {
    const { mac: _old, ...body } = entry;
    entry.mac = await key.sign('scan-index', dir, body);
  }
  await writeFile(indexFile, JSON.stringify(doc));
}

describe('registry scan index (per-user state)', () => {
  it('a scan after a change hashes the changed folder again (the index follows the files)', async () => {
    const { capRoot, registry } = await indexed();
    const dir = await writeCapability(capRoot, 'tool', {}, { 'run.sh': 'echo one\n' });
    const first = (await registry().scan()).capabilities[0]?.contentHash;
    await writeFile(path.join(dir, 'run.sh'), 'echo two\n');
    const second = (await registry().scan()).capabilities[0]?.contentHash;
    expect(second).not.toBe(first);
    expect(second).toBe(await hashFiles(dir, ['capability.json', 'run.sh']));
  });

  it('a tampered index entry is not used: a scan hashes the folder again', async () => {
    const { capRoot, indexFile, key, registry } = await indexed();
    const dir = await writeCapability(capRoot, 'tool', {}, { 'run.sh': 'echo one\n' });
    const real = (await registry().scan()).capabilities[0]?.contentHash;
    const other = `sha256:${'e'.repeat(64)}`;
    await tamper(indexFile, dir, other);
    expect((await registry().scan()).capabilities[0]?.contentHash).toBe(real);
    // Control: the same entry signed with the key is taken at its word (the MAC is what refused it).
    await tamper(indexFile, dir, other, key);
    expect((await registry().scan()).capabilities[0]?.contentHash).toBe(other);
  });

  it('an index written with another key is not used', async () => {
    const { capRoot, indexFile, registry } = await indexed();
    const dir = await writeCapability(capRoot, 'tool', {}, { 'run.sh': 'echo one\n' });
    const real = (await registry().scan()).capabilities[0]?.contentHash;
    const stranger = new StateKey({ stateDir: await mkdtemp(path.join(tmpdir(), 'capsule-scan-other-')) });
    await tamper(indexFile, dir, `sha256:${'e'.repeat(64)}`, stranger);
    expect((await registry().scan()).capabilities[0]?.contentHash).toBe(real);
  });

  it('a tampered index never makes changed content run under the grant of what was approved', async () => {
    const { root, capRoot, indexFile, registry } = await indexed();
    const marker = path.join(root, 'pwned');
    const dir = await writeCapability(capRoot, 'tool', {}, { 'run.sh': 'echo approved\n' });
    const reg = registry();
    const approved = (await reg.scan()).capabilities[0]?.contentHash as string;
    // A person approves this content for the session (the grant is bound to its hash), and it runs.
    const prompter = createScriptedPrompter(['AlwaysThisSession']);
    const gate = await PermissionEngine.create({ projectRoot: root, prompter, audit: new MemoryAuditSink() });
    const executor = new Executor({ registry: reg, gate, runners: [new ShellRunner()] });
    try {
      const ran = await executor.run('tool', {});
      expect(ran.result.stdout).toBe('approved\n');

      // The capability is rewritten, scanned (the index learns its new stamps), and the index is
      // edited to say the new files still hash to the approved content.
      await writeFile(path.join(dir, 'run.sh'), `touch ${marker}\necho changed\n`);
      await reg.scan();
      await tamper(indexFile, dir, approved);
      const lied = registry();
      // The run path hashes the bytes: it names what is on disk, not what the index says.
      const resolved = await lied.get('tool');
      expect(resolved.contentHash).toBe(await hashFiles(dir, ['capability.json', 'run.sh']));
      expect(resolved.contentHash).not.toBe(approved);

      const second = new Executor({ registry: lied, gate, runners: [new ShellRunner()] });
      try {
        await lied.scan();
        const outcome = await second.run('tool', {}).catch((err: unknown) => err);
        // Asked again (the grant covered the approved bytes only) and refused: nothing ran.
        expect(prompter.asked.length).toBe(2);
        expect(outcome).toMatchObject({ code: 'PERMISSION_DENIED' });
        expect(existsSync(marker)).toBe(false);
      } finally {
        await second.close();
      }
    } finally {
      await executor.close();
    }
  });

  it('a folder whose files changed in the last moments is hashed but not remembered', async () => {
    const { root, capRoot } = await tempProject('capsule-scan-settle-');
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-scan-settle-state-'));
    const indexFile = path.join(state, 'index.json');
    const dir = await writeCapability(capRoot, 'tool', {}, { 'run.sh': 'echo one\n' });
    const registry = new Registry({
      roots: ['capabilities'],
      projectRoot: root,
      index: new ScanIndex(indexFile, { key: new StateKey({ stateDir: state }) }),
    });
    const scan = await registry.scan();
    expect(scan.capabilities[0]?.contentHash).toBe(await hashFiles(dir, ['capability.json', 'run.sh']));
    // Just written: a second write in the same timestamp tick would not move its stamp.
    expect(existsSync(indexFile)).toBe(false);
  });

  it('an index that is not an index is ignored: every folder is hashed from its bytes', async () => {
    const { capRoot, indexFile, registry } = await indexed();
    const dir = await writeCapability(capRoot, 'tool', {}, { 'run.sh': 'echo one\n' });
    await registry().scan();
    await writeFile(indexFile, '{"schemaVersion": 1, "folders": {}, "folders": {"x": 1}}');
    const scan = await registry().scan();
    expect(scan.capabilities[0]?.contentHash).toBe(await hashFiles(dir, ['capability.json', 'run.sh']));
  });
});

describe('registry scan of a hostile repository', () => {
  it('a capability.json that is a FIFO is reported invalid, and the scan does not hang on it', async () => {
    const { root, capRoot } = await tempProject('capsule-scan-fifo-');
    await writeCapability(capRoot, 'good', {}, { 'run.sh': 'echo ok\n' });
    await mkdir(path.join(capRoot, 'trap'));
    expect(spawnSync('mkfifo', [path.join(capRoot, 'trap', 'capability.json')]).status).toBe(0);
    const scan = await new Registry({ roots: ['capabilities'], projectRoot: root }).scan();
    expect(scan.capabilities.map((c) => c.name)).toEqual(['good']);
    expect(scan.invalid.map((i) => i.folder)).toEqual(['trap']);
  });
});

describe('the index capsule keeps', () => {
  it('capsule list keeps it in the per-user state folder, and nothing of it in the project', async () => {
    const { root, capRoot } = await tempProject('capsule-scan-list-');
    await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}');
    await writeCapability(capRoot, 'tool', {}, { 'run.sh': 'echo ok\n' });
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-scan-list-state-'));
    const env = { ...process.env, XDG_STATE_HOME: state, CAPSULE_STATE_DIR: undefined };
    // Files changed in the last two seconds are not remembered: wait until they have settled that long.
    await settledFor(capRoot, 2000);
    expect((await cli(['list', '--json'], { cwd: root, env })).code).toBe(0);
    const indexDir = path.join(state, 'capsule', 'registry-index');
    const files = await readdir(indexDir);
    expect(files).toHaveLength(1);
    const doc = JSON.parse(await readFile(path.join(indexDir, files[0] as string), 'utf8')) as {
      folders: Record<string, unknown>;
    };
    expect(Object.keys(doc.folders)).toEqual([path.join(capRoot, 'tool')]);
    expect(await readdir(root)).toEqual(expect.not.arrayContaining(['registry-index']));
    expect(existsSync(path.join(root, '.capsule', 'registry-index'))).toBe(false);
  });
});
