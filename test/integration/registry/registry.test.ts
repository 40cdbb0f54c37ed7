import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Registry } from '../../../src/registry/registry.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';

const SCRIPT = { 'run.sh': 'cat\n' };

describe('Registry', () => {
  it('returns valid capabilities and, separately, invalid ones with file, field and reason', async () => {
    const { root, capRoot } = await tempProject();
    await writeCapability(capRoot, 'good', {}, SCRIPT);
    await writeCapability(capRoot, 'bad-limits', { limits: { timeoutMs: -5 } }, SCRIPT);
    await mkdir(path.join(capRoot, 'no-manifest'));
    await writeFile(path.join(capRoot, 'stray-file.txt'), 'not a folder');

    const scan = await new Registry({ roots: ['capabilities'], projectRoot: root }).scan();
    expect(scan.capabilities.map((c) => c.name)).toEqual(['good']);
    const byFolder = Object.fromEntries(scan.invalid.map((i) => [i.folder, i.issues]));
    expect(byFolder['bad-limits']?.[0]).toMatchObject({
      file: path.join(capRoot, 'bad-limits', 'capability.json'),
      field: 'limits.timeoutMs',
    });
    expect(byFolder['no-manifest']?.[0]?.message).toMatch(/capability\.json/);
    expect(scan.invalid).toHaveLength(2);
  });

  it('a root that is there but cannot be read is an error naming it; a missing one is reported missing', async () => {
    const { root } = await tempProject();
    await writeFile(path.join(root, 'not-a-folder'), 'x');
    await expect(new Registry({ roots: ['not-a-folder'], projectRoot: root }).scan()).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      details: { file: path.join(root, 'not-a-folder') },
    });
  });

  it('requires the name to match the folder and rejects duplicates across roots', async () => {
    const { root, capRoot } = await tempProject();
    await writeCapability(capRoot, 'alpha', { name: 'beta' }, SCRIPT);
    const second = path.join(root, 'more');
    await mkdir(second);
    await writeCapability(capRoot, 'same', {}, SCRIPT);
    await writeCapability(second, 'same', {}, SCRIPT);
    const scan = await new Registry({ roots: ['capabilities', 'more', 'missing'], projectRoot: root }).scan();
    expect(scan.capabilities.map((c) => c.dir)).toEqual([path.join(capRoot, 'same')]);
    expect(scan.invalid.map((i) => i.issues[0]?.field)).toEqual(['name', 'name']);
    expect(scan.missingRoots).toEqual([path.join(root, 'missing')]);
  });

  it('rejects symlinks and paths that leave the capability folder, root or project', async () => {
    const { root, capRoot } = await tempProject();
    const outside = path.join(root, 'outside');
    await writeCapability(outside, 'elsewhere', {}, SCRIPT);
    await symlink(path.join(outside, 'elsewhere'), path.join(capRoot, 'elsewhere'));
    await writeCapability(capRoot, 'entry-link', { entry: 'link.sh' }, SCRIPT);
    await symlink('/bin/sh', path.join(capRoot, 'entry-link', 'link.sh'));
    await writeCapability(capRoot, 'data-link', {}, SCRIPT);
    await symlink('/etc', path.join(capRoot, 'data-link', 'etc'));
    await writeCapability(capRoot, 'grant-link', { grants: { fs: [{ path: 'data' }] } }, SCRIPT);
    await symlink('/etc', path.join(root, 'data'));

    const scan = await new Registry({ roots: ['capabilities'], projectRoot: root }).scan();
    expect(scan.capabilities).toEqual([]);
    const messages = Object.fromEntries(
      scan.invalid.map((i) => [i.folder, i.issues.map((x) => `${x.field ?? ''} ${x.message}`).join('|')]),
    );
    expect(messages['elsewhere']).toMatch(/leaves the capability root/);
    expect(messages['entry-link']).toMatch(/entry .*outside/);
    expect(messages['data-link']).toMatch(/symlink that leaves the capability folder/);
    expect(messages['grant-link']).toMatch(/grants\.fs\[0\]\.path .*outside/);
  });

  it("refuses grants, rw or ro, that hold capsule's own files; a grant beside them is fine", async () => {
    const { root, capRoot } = await tempProject();
    await writeFile(path.join(root, 'capsule.json'), '{}');
    await mkdir(path.join(root, 'data'));
    await writeCapability(capRoot, 'greedy', { grants: { fs: [{ path: '.', mode: 'rw' }] } }, SCRIPT);
    await writeCapability(capRoot, 'reader', { grants: { fs: [{ path: '.', mode: 'ro' }] } }, SCRIPT);
    await writeCapability(capRoot, 'data', { grants: { fs: [{ path: 'data', mode: 'rw' }] } }, SCRIPT);
    const scan = await new Registry({
      roots: ['capabilities'],
      projectRoot: root,
      protectedPaths: [path.join(root, 'capsule.json')],
    }).scan();
    expect(scan.capabilities.map((c) => c.name)).toEqual(['data']);
    expect(scan.invalid.map((i) => i.folder).sort()).toEqual(['greedy', 'reader']);
    expect(scan.invalid[0]?.issues[0]?.message).toMatch(
      /holds .*capsule\.json, which belongs to capsule itself/,
    );
  });

  it('changes the content hash when any file or the environment changes', async () => {
    const { root, capRoot } = await tempProject();
    const dir = await writeCapability(capRoot, 'h', {}, SCRIPT);
    const registry = new Registry({ roots: ['capabilities'], projectRoot: root });
    const first = (await registry.get('h')).contentHash;
    expect((await registry.get('h')).contentHash).toBe(first);
    await writeFile(path.join(dir, 'run.sh'), 'cat # changed\n');
    const second = (await registry.get('h')).contentHash;
    expect(second).not.toBe(first);
    await writeFile(path.join(dir, 'notes.txt'), 'data');
    expect((await registry.get('h')).contentHash).not.toBe(second);
  });

  it('survives capability folders disappearing during a scan', async () => {
    const { root, capRoot } = await tempProject();
    const names = Array.from({ length: 120 }, (_, i) => `cap-${String(i).padStart(3, '0')}`);
    for (const n of names) await writeCapability(capRoot, n, {}, SCRIPT);
    const registry = new Registry({ roots: ['capabilities'], projectRoot: root });
    const scanning = registry.scan();
    const removing = Promise.all(
      names
        .filter((_, i) => i % 2 === 1)
        .map((n) => rm(path.join(capRoot, n), { recursive: true, force: true })),
    );
    const [scan] = await Promise.all([scanning, removing]);
    // Every folder is accounted for exactly once: valid, reported invalid, or already gone.
    for (const c of scan.capabilities) expect(names).toContain(c.name);
    for (const i of scan.invalid)
      expect(i.issues[0]?.message).toMatch(/disappeared|missing|cannot be read|does not exist|ENOENT/);
    const rescan = await registry.scan();
    expect(rescan.capabilities.map((c) => c.name)).toEqual(names.filter((_, i) => i % 2 === 0));
  });

  it('reports unknown names and invalid capabilities distinctly', async () => {
    const { root, capRoot } = await tempProject();
    await writeCapability(capRoot, 'broken', { entry: '../x.sh' }, SCRIPT);
    const registry = new Registry({ roots: ['capabilities'], projectRoot: root });
    await expect(registry.get('nope')).rejects.toMatchObject({ code: 'NOT_FOUND' });
    await expect(registry.get('broken')).rejects.toMatchObject({
      code: 'MANIFEST_INVALID',
      details: { field: 'entry' },
    });
  });
});
