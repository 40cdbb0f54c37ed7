import { chmod, chown, mkdir, mkdtemp, readdir, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalJson, StateKey, STATE_KEY_FILE } from '../../../src/project/state-key.js';
import { secretDir } from '../../../src/base/user-state.js';

const fresh = () => mkdtemp(path.join(tmpdir(), 'capsule-key-'));
const isRoot = process.getuid?.() === 0;

describe('the per-user state key', () => {
  it('is made on first use: 32 bytes, file 0600 in <stateDir>/secret (0700), no temp file left', async () => {
    const stateDir = await fresh();
    const key = new StateKey({ stateDir });
    expect(key.file).toBe(path.join(stateDir, 'secret', STATE_KEY_FILE));
    expect(secretDir(stateDir)).toBe(path.join(stateDir, 'secret'));
    const bytes = await key.load();
    expect(bytes.length).toBe(32);
    expect((await stat(key.file)).mode & 0o777).toBe(0o600);
    expect((await stat(secretDir(stateDir))).mode & 0o777).toBe(0o700);
    expect(await readdir(secretDir(stateDir))).toEqual([STATE_KEY_FILE]);
    expect(Buffer.compare(await readFile(key.file), bytes)).toBe(0);
  });

  it('another instance on the same folder reads the same key; another folder has another', async () => {
    const stateDir = await fresh();
    const a = new StateKey({ stateDir });
    const b = new StateKey({ stateDir });
    const mac = await a.sign('audit-head', 'x.json', { records: 1 });
    expect(await b.verify('audit-head', 'x.json', { records: 1 }, mac)).toBe(true);
    const c = new StateKey({ stateDir: await fresh() });
    expect(await c.verify('audit-head', 'x.json', { records: 1 }, mac)).toBe(false);
  });

  it('a MAC binds purpose, subject and every field, and not key order or spacing', async () => {
    const key = new StateKey({ stateDir: await fresh() });
    const mac = await key.sign('policy-snapshot', 'a.json', { b: 1, a: [1, { y: 2, x: 'z' }] });
    expect(mac).toMatch(/^hmac-sha256:[0-9a-f]{64}$/);
    expect(await key.verify('policy-snapshot', 'a.json', { a: [1, { x: 'z', y: 2 }], b: 1 }, mac)).toBe(true);
    expect(await key.verify('audit-head', 'a.json', { b: 1, a: [1, { y: 2, x: 'z' }] }, mac)).toBe(false);
    expect(await key.verify('policy-snapshot', 'b.json', { b: 1, a: [1, { y: 2, x: 'z' }] }, mac)).toBe(
      false,
    );
    expect(await key.verify('policy-snapshot', 'a.json', { b: 2, a: [1, { y: 2, x: 'z' }] }, mac)).toBe(
      false,
    );
    expect(
      await key.verify('policy-snapshot', 'a.json', { b: 1, a: [1, { y: 2, x: 'z' }] }, 'sha256:0'),
    ).toBe(false);
    expect(await key.verify('policy-snapshot', 'a.json', {}, undefined)).toBe(false);
    expect(canonicalJson({ b: 1, a: undefined, c: [undefined, 'é'] })).toBe('{"b":1,"c":[null,"é"]}');
  });

  it('concurrent first uses in one process agree on one key', async () => {
    const stateDir = await fresh();
    const keys = await Promise.all(Array.from({ length: 16 }, () => new StateKey({ stateDir }).load()));
    for (const k of keys) expect(Buffer.compare(k, keys[0] as Buffer)).toBe(0);
    expect(await readdir(secretDir(stateDir))).toEqual([STATE_KEY_FILE]);
  });

  it('a key file of the wrong size is an error naming the file and what to do', async () => {
    const stateDir = await fresh();
    await mkdir(secretDir(stateDir), { mode: 0o700 });
    const file = path.join(secretDir(stateDir), STATE_KEY_FILE);
    await writeFile(file, 'short', { mode: 0o600 });
    await expect(new StateKey({ stateDir }).load()).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining(`${file} holds 5 byte(s), not 32`),
      details: { file, hint: expect.stringContaining(`Delete ${file}`) },
    });
  });

  it('a key others may read, or its folder, is an error', async () => {
    const stateDir = await fresh();
    const key = new StateKey({ stateDir });
    await key.load();
    await chmod(key.file, 0o644);
    await expect(new StateKey({ stateDir }).load()).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('mode 644'),
    });
    await chmod(key.file, 0o600);
    await chmod(secretDir(stateDir), 0o755);
    await expect(new StateKey({ stateDir }).load()).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      details: { hint: expect.stringContaining(`chmod 700 ${secretDir(stateDir)}`) },
    });
    await chmod(secretDir(stateDir), 0o700);
    expect((await new StateKey({ stateDir }).load()).length).toBe(32);
  });

  it('a key that is a symlink is refused (never followed to a file someone else chose)', async () => {
    const stateDir = await fresh();
    const elsewhere = path.join(await fresh(), 'k');
    await writeFile(elsewhere, Buffer.alloc(32, 7), { mode: 0o600 });
    await mkdir(secretDir(stateDir), { mode: 0o700 });
    await symlink(elsewhere, path.join(secretDir(stateDir), STATE_KEY_FILE));
    await expect(new StateKey({ stateDir }).load()).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('symlink'),
    });
  });

  it.runIf(isRoot)('a key owned by another user is an error naming the owner', async () => {
    const stateDir = await fresh();
    const key = new StateKey({ stateDir });
    await key.load();
    await chown(key.file, 65534, 65534);
    await expect(new StateKey({ stateDir }).load()).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('belongs to uid 65534, not to this user (uid 0)'),
    });
  });

  it('a state folder that cannot hold the key is an error naming it', async () => {
    const parent = await fresh();
    await writeFile(path.join(parent, 'file'), '');
    const stateDir = path.join(parent, 'file', 'state');
    await expect(new StateKey({ stateDir }).load()).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      details: { file: secretDir(stateDir) },
    });
  });
});
