import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { addPermissionRules } from '../../../src/project/config-store.js';

async function file(text?: string): Promise<string> {
  const f = path.join(await mkdtemp(path.join(tmpdir(), 'capsule-store-')), 'capsule.json');
  if (text !== undefined) await writeFile(f, text);
  return f;
}

describe('addPermissionRules', () => {
  it('adds rules once, keeps what the file holds, and creates the file when there is none', async () => {
    const f = await file(
      JSON.stringify({ schemaVersion: 1, roots: ['caps'], permissions: { deny: ['run_command(rm *)'] } }),
    );
    const added = await addPermissionRules(f, {
      deny: ['run_command(rm *)', 'run_command(rm)', 'run_command(rm)'],
      allow: ['run_capability(w*)'],
    });
    expect(added).toEqual({ deny: ['run_command(rm)'], allow: ['run_capability(w*)'] });
    const saved = JSON.parse(await readFile(f, 'utf8')) as Record<string, unknown>;
    expect(saved).toEqual({
      schemaVersion: 1,
      roots: ['caps'],
      permissions: { deny: ['run_command(rm *)', 'run_command(rm)'], allow: ['run_capability(w*)'] },
    });
    const fresh = await file();
    await addPermissionRules(fresh, { deny: ['write_file(secrets/**)'] });
    expect(JSON.parse(await readFile(fresh, 'utf8'))).toEqual({
      schemaVersion: 1,
      permissions: { deny: ['write_file(secrets/**)'] },
    });
  });

  it('writes nothing when one rule could never match, or the file does not parse', async () => {
    const text = `${JSON.stringify({ schemaVersion: 1 }, null, 2)}\n`;
    const f = await file(text);
    await expect(
      addPermissionRules(f, { deny: ['run_command(rm)'], allow: ['run_command(gi* status)'] }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    expect(await readFile(f, 'utf8')).toBe(text);
    const broken = await file('{ "schemaVersion": 1,');
    await expect(addPermissionRules(broken, { deny: ['run_command(rm)'] })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
    });
    expect(await readFile(broken, 'utf8')).toBe('{ "schemaVersion": 1,');
  });
});
