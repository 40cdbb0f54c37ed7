import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readOptionalFile } from '../../../src/base/optional-file.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'capsule-optional-file-'));
  await writeFile(path.join(dir, 'present'), 'text');
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('readOptionalFile', () => {
  it('gives the contents of a file that is there, as text or bytes', async () => {
    expect(await readOptionalFile(path.join(dir, 'present'), 'utf8')).toBe('text');
    expect(await readOptionalFile(path.join(dir, 'present'))).toEqual(Buffer.from('text'));
  });

  it('gives undefined for a file that is not there', async () => {
    expect(await readOptionalFile(path.join(dir, 'absent'), 'utf8')).toBeUndefined();
  });

  it('throws when something is there but cannot be read as a file', async () => {
    await expect(readOptionalFile(dir, 'utf8')).rejects.toMatchObject({ code: 'EISDIR' });
  });
});
