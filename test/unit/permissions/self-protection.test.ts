import { mkdir, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  assertNotProtected,
  protectedPaths,
  protectedTarget,
} from '../../../src/permissions/self-protection.js';
import { tempProject } from './helpers.js';

describe('self-protection', () => {
  it('lists capsule.json, .capsule/, the audit log and profiles', () => {
    const p = protectedPaths('/proj');
    expect(p.configFile).toBe('/proj/capsule.json');
    expect(p.auditLog).toBe('/proj/.capsule/audit.jsonl');
    expect(p.profilesDir).toBe('/proj/.capsule/profiles');
  });

  it('lexical check catches relative, absolute, dotted and differently cased paths', () => {
    for (const t of [
      'capsule.json',
      '/proj/capsule.json',
      'a/../capsule.json',
      'Capsule.JSON',
      '.capsule',
      '.capsule/x',
    ]) {
      expect(protectedTarget('/proj', t)).toBeDefined();
    }
    for (const t of ['capsule.json.bak', 'src/capsule.json', '.capsulex/y', 'src/a.ts']) {
      expect(protectedTarget('/proj', t)).toBeUndefined();
    }
  });

  it('assertNotProtected follows symlinks', async () => {
    const { root } = await tempProject({});
    await mkdir(path.join(root, 'src'));
    await symlink(path.join(root, 'capsule.json'), path.join(root, 'src', 'innocent.json'));
    await symlink(path.join(root, '.capsule'), path.join(root, 'state'));
    await mkdir(path.join(root, '.capsule'));
    await expect(assertNotProtected(root, 'src/innocent.json')).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
    });
    await expect(assertNotProtected(root, 'state/audit.jsonl')).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
    });
    await writeFile(path.join(root, 'src', 'ok.ts'), '');
    await expect(assertNotProtected(root, 'src/ok.ts')).resolves.toBeUndefined();
    await expect(assertNotProtected(root, 'src/new/deep.ts')).resolves.toBeUndefined();
  });
});
