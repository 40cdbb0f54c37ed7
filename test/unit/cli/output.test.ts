import { describe, expect, it } from 'vitest';
import { reportError, type CliIO } from '../../../src/cli/output.js';
import { CapsuleError } from '../../../src/base/errors.js';
import { memoryIO } from '../../helpers/io.js';

function io(env: NodeJS.ProcessEnv = {}): CliIO & { err: () => string; out: () => string } {
  const mem = memoryIO({ cwd: '/', env });
  return Object.assign(mem.io, { err: mem.stderr, out: mem.stdout });
}

const wrapped = (): CapsuleError => {
  const fsError = Object.assign(new Error("EACCES: permission denied, open '/x/capsule.json'"), {
    code: 'EACCES',
  });
  return new CapsuleError(
    'CONFIG_INVALID',
    '/x/capsule.json cannot be read (EACCES).',
    {},
    { cause: fsError },
  );
};

describe('reportError', () => {
  it('prints the cause chain under CAPSULE_DEBUG=1 only', async () => {
    const quiet = io();
    expect(await reportError(quiet, wrapped(), false)).toBe(78);
    expect(quiet.err()).not.toContain('caused by');
    const debug = io({ CAPSULE_DEBUG: '1' });
    expect(await reportError(debug, wrapped(), false)).toBe(78);
    expect(debug.err()).toContain("caused by: EACCES: EACCES: permission denied, open '/x/capsule.json'\n");
  });

  it('a canceled call exits 130, never as a usage error', async () => {
    const out = io();
    expect(await reportError(out, new CapsuleError('CANCELED', 'sleep was canceled.'), true)).toBe(130);
    expect(JSON.parse(out.out())).toMatchObject({ error: { code: 'CANCELED' } });
  });
});
