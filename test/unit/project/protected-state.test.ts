import { mkdir, mkdtemp, realpath, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  assertGrantsUnprotected,
  assertNotProtected,
  confinedPaths,
  hostProtection,
  findCapabilityRoot,
  findProtectedState,
  isReservedName,
  protectedPaths,
  protectedStateHit,
} from '../../../src/project/protected-state.js';
import { userCacheDir } from '../../../src/base/cache-dir.js';

describe('protected state: the lexical core', () => {
  it('lists capsule.json, .capsule/, the audit log, profiles, locks and the cache dir', () => {
    const p = protectedPaths('/proj', '/home/u/.cache/capsule');
    expect(p.configFile).toBe('/proj/capsule.json');
    expect(p.auditLog).toBe('/proj/.capsule/audit.jsonl');
    expect(p.profilesDir).toBe('/proj/.capsule/profiles');
    expect(p.locksDir).toBe('/proj/.capsule/locks');
    expect(p.all).toContain('/home/u/.cache/capsule');
  });

  it('is inside, contains, or names capsule state at any depth', () => {
    const also = { also: ['/home/u/.cache/capsule'] };
    const cases: Array<[string, string | undefined]> = [
      ['capsule.json', 'inside'],
      ['/proj/capsule.json', 'inside'],
      ['a/../capsule.json', 'inside'],
      ['Capsule.JSON', 'inside'],
      ['.capsule', 'inside'],
      ['.capsule/cache/wasm/x', 'inside'],
      ['.capsule/locks', 'inside'],
      ['.', 'contains'],
      ['/', 'contains'],
      ['/home/u', 'contains'],
      ['/home/u/.cache/capsule/wasm/x', 'inside'],
      ['sub/capsule.json', 'reserved-name'],
      ['sub/.capsule/profiles/x.md', 'reserved-name'],
      ['a/b/.CAPSULE/x', 'reserved-name'],
      ['.capsule-cache/x', 'reserved-name'],
      ['sub/.capsule.old', 'reserved-name'],
      ['capsule.json.bak', undefined],
      ['src/a.ts', undefined],
      ['.capsulex/y', undefined],
      ['sub', undefined],
      ['/elsewhere/capsule.json', undefined],
    ];
    for (const [target, relation] of cases) {
      expect(`${target}: ${protectedStateHit('/proj', target, also)?.relation}`).toBe(
        `${target}: ${relation}`,
      );
    }
    // A working directory: the root is fine, inside the state is not.
    expect(protectedStateHit('/proj', '.', { containing: false })).toBeUndefined();
    expect(protectedStateHit('/proj', '.capsule/locks', { containing: false })?.relation).toBe('inside');
  });

  it('reserves capsule.json and .capsule / .capsule-* / .capsule.* names only', () => {
    for (const n of [
      'capsule.json',
      'CAPSULE.JSON',
      '.capsule',
      '.capsule-cache',
      '.capsule.bak',
      '.capsule_x',
    ]) {
      expect(`${n}: ${isReservedName(n)}`).toBe(`${n}: true`);
    }
    for (const n of ['capsule', 'capsule.json5', '.capsules', 'my.capsule', 'capability.json']) {
      expect(`${n}: ${isReservedName(n)}`).toBe(`${n}: false`);
    }
  });
});

describe('protected state: after realpath', () => {
  async function project(): Promise<string> {
    const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-protected-')));
    await writeFile(path.join(root, 'capsule.json'), '{}');
    await mkdir(path.join(root, '.capsule', 'profiles'), { recursive: true });
    await mkdir(path.join(root, 'src'));
    return root;
  }

  it('follows symlinks (also dangling ones, and a symlinked root)', async () => {
    const root = await project();
    await symlink(path.join(root, 'capsule.json'), path.join(root, 'src', 'innocent.json'));
    await symlink(path.join(root, '.capsule'), path.join(root, 'state'));
    await symlink(path.join(root, '.capsule', 'profiles', 'new.md'), path.join(root, 'src', 'dangling.md'));
    await symlink(root, path.join(root, 'loop-root'));
    const alias = path.join(await realpath(os.tmpdir()), `capsule-alias-${process.pid}-${Date.now()}`);
    await symlink(root, alias);
    for (const t of ['src/innocent.json', 'state/audit.jsonl', 'src/dangling.md', 'loop-root']) {
      expect(`${t}: ${(await findProtectedState(root, t)) !== undefined}`).toBe(`${t}: true`);
      await expect(assertNotProtected(root, t)).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    }
    // Through a symlinked project root, the same answers.
    expect(await findProtectedState(alias, 'state/x')).toBeDefined();
    expect(await findProtectedState(alias, path.join(alias, 'capsule.json'))).toBeDefined();
    await writeFile(path.join(root, 'src', 'ok.ts'), '');
    await expect(assertNotProtected(root, 'src/ok.ts')).resolves.toBeUndefined();
    await expect(assertNotProtected(root, 'src/new/deep.ts')).resolves.toBeUndefined();
  });

  it('protects where a symlinked capsule.json or state folder really is', async () => {
    const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-protected-')));
    await mkdir(path.join(root, 'config'));
    await writeFile(path.join(root, 'config', 'policy.json'), '{}');
    await symlink(path.join(root, 'config', 'policy.json'), path.join(root, 'capsule.json'));
    await mkdir(path.join(root, '.capsule'));
    await mkdir(path.join(root, 'profiles-src'));
    await symlink(path.join(root, 'profiles-src'), path.join(root, '.capsule', 'profiles'));
    await mkdir(path.join(root, 'other'));
    for (const t of ['config', 'config/policy.json', 'profiles-src', 'profiles-src/evil.md']) {
      expect(`${t}: ${(await findProtectedState(root, t)) !== undefined}`).toBe(`${t}: true`);
    }
    expect(await findProtectedState(root, 'other')).toBeUndefined();
  });

  it('assertGrantsUnprotected names the field of the first grant that reaches the state', async () => {
    const root = await project();
    const cache = await realpath(await mkdtemp(path.join(os.tmpdir(), 'capsule-cache-')));
    await expect(
      assertGrantsUnprotected(
        [
          { declared: 'src', hostPath: path.join(root, 'src') },
          { declared: '.capsule', hostPath: path.join(root, '.capsule') },
        ],
        { projectRoot: root },
      ),
    ).rejects.toMatchObject({ code: 'PERMISSION_DENIED', details: { field: 'grants.fs[1].path' } });
    await expect(
      assertGrantsUnprotected([{ declared: 'x', hostPath: path.join(cache, 'wasm') }], { also: [cache] }),
    ).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await expect(
      assertGrantsUnprotected([{ declared: 'src', hostPath: path.join(root, 'src') }], {
        projectRoot: root,
        also: [cache],
      }),
    ).resolves.toBeUndefined();
  });

  it('findCapabilityRoot: inside or holding a capability root, after symlinks', async () => {
    const root = await project();
    await mkdir(path.join(root, 'capabilities', 'x'), { recursive: true });
    await symlink(path.join(root, 'capabilities', 'x'), path.join(root, 'src', 'x-link'));
    const roots = [path.join(root, 'capabilities')];
    for (const [t, relation] of [
      ['capabilities', 'inside'],
      ['capabilities/x', 'inside'],
      ['capabilities/x/new/deep', 'inside'],
      ['src/x-link', 'inside'],
      ['.', 'contains'],
    ] as const) {
      expect(`${t}: ${(await findCapabilityRoot(root, t, roots))?.relation}`).toBe(`${t}: ${relation}`);
    }
    expect(await findCapabilityRoot(root, 'src', roots)).toBeUndefined();
    // A root named relative to the project, or through a symlink, is the same root.
    expect(await findCapabilityRoot(root, 'capabilities/x', ['capabilities'])).toBeDefined();
    await symlink(path.join(root, 'capabilities'), path.join(root, 'caps-link'));
    expect(await findCapabilityRoot(root, 'capabilities/x', ['caps-link'])).toBeDefined();
  });

  it('assertGrantsUnprotected refuses an rw grant over a capability root, not an ro one', async () => {
    const root = await project();
    const caps = path.join(root, 'capabilities');
    await mkdir(path.join(caps, 'x'), { recursive: true });
    const own = { declared: 'capabilities/x', hostPath: path.join(caps, 'x') };
    await expect(
      assertGrantsUnprotected([{ ...own, mode: 'rw' }], { projectRoot: root, capabilityRoots: [caps] }),
    ).rejects.toMatchObject({ code: 'PERMISSION_DENIED', details: { field: 'grants.fs[0].path' } });
    await expect(
      assertGrantsUnprotected([{ ...own, mode: 'ro' }], { projectRoot: root, capabilityRoots: [caps] }),
    ).resolves.toBeUndefined();
    await expect(
      assertGrantsUnprotected([{ declared: 'src', hostPath: path.join(root, 'src'), mode: 'rw' }], {
        projectRoot: root,
        capabilityRoots: [caps],
      }),
    ).resolves.toBeUndefined();
  });
});

describe('confinedPaths and the per-user cache dir', () => {
  it('makes only Claude Code’s project folder when missing (a missing capsule.json stays missing)', () => {
    const h = hostProtection(confinedPaths('/proj', '/c', '/s'));
    expect(h.madeFolders).toEqual(['/proj/.claude']);
    expect(h.readOnly).toContain('/proj/.claude');
  });

  it('lists the project config and state, Claude Code’s project folder and the cache read-only, the per-user state and its key hidden', () => {
    expect(confinedPaths('/proj', '/home/u/.cache/capsule', '/home/u/.local/state/capsule')).toEqual([
      expect.objectContaining({ path: '/proj/capsule.json', access: 'read-only' }),
      expect.objectContaining({ path: '/proj/.capsule', access: 'read-only' }),
      expect.objectContaining({ path: '/proj/.claude', access: 'read-only', makeFolder: true }),
      expect.objectContaining({ path: '/home/u/.cache/capsule', access: 'read-only' }),
      expect.objectContaining({ path: '/home/u/.local/state/capsule', access: 'hidden' }),
      expect.objectContaining({
        path: '/home/u/.local/state/capsule/secret',
        access: 'hidden',
        what: 'per-user key that authenticates confirmed policies, audit heads and the scan index',
      }),
    ]);
  });

  it('takes XDG_CACHE_HOME when absolute, else HOME/.cache, else the given home', () => {
    expect(userCacheDir({ XDG_CACHE_HOME: '/x/cache', HOME: '/h' })).toBe('/x/cache/capsule');
    expect(userCacheDir({ XDG_CACHE_HOME: 'relative', HOME: '/h' })).toBe('/h/.cache/capsule');
    expect(userCacheDir({ HOME: '/h' })).toBe('/h/.cache/capsule');
    expect(userCacheDir({}, '/fallback')).toBe('/fallback/.cache/capsule');
  });
});
