import { readFile, writeFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { removeAllowlistEntry, setAllowlistEntry } from '../../../src/project/config-store.js';
import {
  loadProjectConfig,
  normalizeAllowlist,
  parseProjectConfig,
} from '../../../src/project/project-config.js';
import { isCapsuleError, type CapsuleError } from '../../../src/base/errors.js';
import { HASH_A, tempProject } from '../permissions/helpers.js';

function configError(text: string): CapsuleError {
  try {
    parseProjectConfig(text, '/p/capsule.json');
  } catch (err) {
    if (isCapsuleError(err)) return err;
    throw err;
  }
  throw new Error('expected an error');
}

describe('capsule.json schema', () => {
  it('defaults: empty allowlist, no rules, default mode', () => {
    expect(parseProjectConfig('{}', 'x')).toEqual({
      schemaVersion: 1,
      roots: ['capabilities'],
      mode: 'default',
      allowlist: {},
      permissions: { allow: [], deny: [] },
    });
  });

  it('accepts both entry forms and normalizes them', () => {
    const c = parseProjectConfig(
      JSON.stringify({
        allowlist: {
          'write_file:tests/**': 'AlwaysThisProject',
          'run_capability:w': { level: 'AlwaysThisProject', contentHash: HASH_A, environment: 'wasm' },
          'run_command:rm': 'Deny',
        },
      }),
      'x',
    );
    expect(normalizeAllowlist(c.allowlist)).toEqual([
      { key: 'write_file:tests/**', level: 'AlwaysThisProject' },
      { key: 'run_capability:w', level: 'AlwaysThisProject', contentHash: HASH_A, environment: 'wasm' },
      { key: 'run_command:rm', level: 'Deny' },
    ]);
  });

  it('malformed JSON: CONFIG_INVALID naming the file', () => {
    const err = configError('{ "allowlist": ');
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.details.file).toBe('/p/capsule.json');
    expect(err.message).toContain('not valid JSON');
  });

  it('a session level in the file is refused with what to do instead', () => {
    const err = configError(JSON.stringify({ allowlist: { 'run_command:cargo': 'AlwaysThisSession' } }));
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.details.field).toBe('allowlist.run_command:cargo');
    expect(err.message).toContain('--grant');
  });

  it('a malformed key, hash, rule or mode names the field', () => {
    expect(configError(JSON.stringify({ allowlist: { nocolon: 'AlwaysThisProject' } })).message).toMatch(
      /not a permission key/,
    );
    expect(
      configError(
        JSON.stringify({
          allowlist: { 'run_capability:w': { level: 'AlwaysThisProject', contentHash: 'md5:x' } },
        }),
      ).details.field,
    ).toBe('allowlist.run_capability:w.contentHash');
    expect(configError(JSON.stringify({ permissions: { allow: ['Bash git'] } })).details.field).toBe(
      'permissions.allow[0]',
    );
    expect(configError(JSON.stringify({ mode: 'yolo' })).details.field).toBe('mode');
    expect(configError(JSON.stringify({ alowlist: {} })).details.field).toBe('alowlist');
  });

  it('loadProjectConfig finds the nearest capsule.json and reports a broken one', async () => {
    const { root, file } = await tempProject('[1,');
    await expect(loadProjectConfig(root)).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      details: { file },
    });
  });
});

describe('writing capsule.json', () => {
  it('never overwrites a file that failed to parse', async () => {
    const { file } = await tempProject('{ "allowlist": { "a:b": "AlwaysThisProject", }');
    const before = await readFile(file, 'utf8');
    await expect(setAllowlistEntry(file, 'run_capability:w', 'AlwaysThisProject')).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
    });
    expect(await readFile(file, 'utf8')).toBe(before);
  });

  it('never overwrites a file that parses as JSON but not as capsule.json', async () => {
    const { file } = await tempProject({ allowlist: { 'run_command:x': 'Sometimes' } });
    const before = await readFile(file, 'utf8');
    await expect(setAllowlistEntry(file, 'run_capability:w', 'AlwaysThisProject')).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
    });
    expect(await readFile(file, 'utf8')).toBe(before);
  });

  it('keeps the other fields, adds and removes entries', async () => {
    const { file } = await tempProject({
      roots: ['caps', 'more'],
      permissions: { allow: ['run_command(git *)'] },
    });
    await setAllowlistEntry(file, 'run_capability:w', { level: 'AlwaysThisProject', contentHash: HASH_A });
    let saved = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    expect(saved).toMatchObject({
      roots: ['caps', 'more'],
      permissions: { allow: ['run_command(git *)'] },
      allowlist: { 'run_capability:w': { level: 'AlwaysThisProject', contentHash: HASH_A } },
    });
    expect(await removeAllowlistEntry(file, 'run_capability:w')).toBe(true);
    expect(await removeAllowlistEntry(file, 'run_capability:w')).toBe(false);
    saved = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    expect(saved.allowlist).toEqual({});
  });

  it('creates capsule.json when there is none; revoking on a missing file writes nothing', async () => {
    const { root, file } = await tempProject();
    expect(await removeAllowlistEntry(file, 'a:b')).toBe(false);
    await expect(readFile(file)).rejects.toMatchObject({ code: 'ENOENT' });
    await setAllowlistEntry(file, 'run_capability:w', 'AlwaysThisProject');
    expect((await loadProjectConfig(root)).config.allowlist).toEqual({
      'run_capability:w': 'AlwaysThisProject',
    });
  });

  it('concurrent "always" answers in one process: no lost update, no torn file', async () => {
    const { file } = await tempProject({ roots: ['capabilities'] });
    const keys = Array.from({ length: 40 }, (_, i) => `run_capability:cap${i}`);
    await Promise.all(
      keys.map((k) => setAllowlistEntry(file, k, { level: 'AlwaysThisProject', contentHash: HASH_A })),
    );
    const saved = parseProjectConfig(await readFile(file, 'utf8'), file);
    expect(Object.keys(saved.allowlist).sort()).toEqual([...keys].sort());
  });

  it('a hand edit between two writes is kept (each write re-reads the file under the lock)', async () => {
    const { file } = await tempProject({});
    await setAllowlistEntry(file, 'run_capability:a', 'AlwaysThisProject');
    const raw = JSON.parse(await readFile(file, 'utf8')) as { allowlist: Record<string, string> };
    raw.allowlist['run_capability:hand'] = 'Deny';
    await writeFile(file, JSON.stringify(raw));
    await setAllowlistEntry(file, 'run_capability:b', 'AlwaysThisProject');
    const saved = parseProjectConfig(await readFile(file, 'utf8'), file);
    expect(Object.keys(saved.allowlist).sort()).toEqual([
      'run_capability:a',
      'run_capability:b',
      'run_capability:hand',
    ]);
  });
});
