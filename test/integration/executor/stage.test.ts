import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CapabilityStage } from '../../../src/executor/stage.js';
import { loadValid, tempProject, writeCapability } from '../../helpers/capability.js';
import { codeOf } from '../../helpers/agent-fixture.js';

const stages: CapabilityStage[] = [];
afterEach(async () => {
  for (const s of stages.splice(0)) await s.close();
});

function newStage(): CapabilityStage {
  const stage = new CapabilityStage();
  stages.push(stage);
  return stage;
}

async function capability(files: Record<string, string> = {}) {
  const { root, capRoot } = await tempProject('capsule-stage-test-');
  const dir = await writeCapability(capRoot, 'cap', {}, { 'run.sh': 'echo approved\n', ...files });
  return { root, dir, capability: await loadValid(dir, root, capRoot) };
}

describe('the stage holds exactly the approved bytes', () => {
  it('stages the hashed files read-only, outside the project, and leaves an unnamed cases.json out', async () => {
    const { root, capability: cap } = await capability({ 'cases.json': '[]', 'lib/a.sh': 'a' });
    const staged = await newStage().stage(cap);
    expect(staged.contentHash).toBe(cap.contentHash);
    expect(path.relative(root, staged.dir).startsWith('..')).toBe(true);
    expect(staged.entryPath).toBe(path.join(staged.dir, 'run.sh'));
    expect(await readFile(staged.entryPath, 'utf8')).toBe('echo approved\n');
    expect((await readdir(staged.dir)).sort()).toEqual(['capability.json', 'lib', 'run.sh']);
    expect((await stat(staged.entryPath)).mode & 0o222).toBe(0);
    expect((await stat(staged.dir)).mode & 0o222).toBe(0);
  });

  it('an entry that is a symlink to cases.json is hashed and staged as the file it points to', async () => {
    const { root, capRoot } = await tempProject('capsule-stage-test-');
    const dir = await writeCapability(capRoot, 'linked', { entry: 'run.sh' }, { 'cases.json': 'echo one\n' });
    await symlink('cases.json', path.join(dir, 'run.sh'));
    const before = await loadValid(dir, root, capRoot);
    const staged = await newStage().stage(before);
    expect(await readFile(staged.entryPath, 'utf8')).toBe('echo one\n');
    await writeFile(path.join(dir, 'cases.json'), 'echo two\n');
    expect((await loadValid(dir, root, capRoot)).contentHash).not.toBe(before.contentHash);
  });

  it('a folder that changed after it was hashed is refused, and nothing of it is staged', async () => {
    const { dir, capability: cap } = await capability();
    await writeFile(path.join(dir, 'run.sh'), 'echo swapped\n');
    const stage = newStage();
    expect(await codeOf(stage.stage(cap))).toBe('MANIFEST_INVALID');
    // A file added after hashing is a change too.
    const other = await capability();
    await writeFile(path.join(other.dir, 'extra.sh'), 'x');
    expect(await codeOf(stage.stage(other.capability))).toBe('MANIFEST_INVALID');
  });

  it('a symlink swapped to point outside after hashing is refused', async () => {
    const { dir, root, capability: cap } = await capability({ 'data.txt': 'inside' });
    await writeFile(path.join(root, 'secret'), 'outside');
    await rm(path.join(dir, 'data.txt'));
    await symlink(path.join(root, 'secret'), path.join(dir, 'data.txt'));
    expect(await codeOf(newStage().stage(cap))).toBe('MANIFEST_INVALID');
  });

  it('a FIFO swapped in for a file does not hang the copy', async () => {
    const { dir, capability: cap } = await capability();
    await rm(path.join(dir, 'run.sh'));
    execFileSync('mkfifo', [path.join(dir, 'run.sh')]);
    expect(await codeOf(newStage().stage(cap))).toBe('MANIFEST_INVALID');
  });

  it('a staged copy changed underneath is staged afresh from the approved bytes', async () => {
    const { capability: cap } = await capability();
    const stage = newStage();
    const first = await stage.stage(cap);
    await chmod(first.entryPath, 0o644);
    await writeFile(first.entryPath, 'echo tampered\n');
    const again = await stage.stage(cap);
    expect(await readFile(again.entryPath, 'utf8')).toBe('echo approved\n');
  });

  it('close() removes every staged copy', async () => {
    const { capability: cap } = await capability();
    const stage = new CapabilityStage();
    const staged = await stage.stage(cap);
    await stage.close();
    expect(existsSync(staged.dir)).toBe(false);
    expect(existsSync(path.dirname(staged.dir))).toBe(false);
  });
});
