import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { BUILT_CLI } from '../../helpers/cli.js';

// As an ordinary user (uid 65534) capsule makes its own key in its own state folder and its records
// verify; the same folder used by another user (root here) is refused, naming the owner: a key another
// account holds vouches for nothing of this one.

const isRoot = process.getuid?.() === 0;

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the CLI integration tests');
});

async function asUser(uid: number, cwd: string, env: Record<string, string>, args: string[]) {
  const argv = ['node', BUILT_CLI, ...args];
  const r =
    uid === 0
      ? await execa(argv[0] as string, argv.slice(1), { cwd, env, reject: false, input: '' })
      : await execa('setpriv', ['--reuid', String(uid), '--regid', String(uid), '--clear-groups', ...argv], {
          cwd,
          env,
          reject: false,
          input: '',
        });
  return { code: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe.runIf(isRoot)('the state key as an ordinary user', () => {
  it('uid 65534 makes its own key, its records verify; root refuses that folder, naming the owner', async () => {
    const base = await mkdtemp(path.join(tmpdir(), 'capsule-key-user-'));
    await chmod(base, 0o755);
    const root = path.join(base, 'project');
    const state = path.join(base, 'state');
    await mkdir(path.join(root, 'capabilities'), { recursive: true });
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
    const home = path.join(base, 'home');
    await mkdir(state);
    await mkdir(home);
    for (const p of [root, path.join(root, 'capabilities'), state, home]) await chown(p, 65534, 65534);
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, CAPSULE_STATE_DIR: state };
    // A decision is recorded (and its head written) by the ordinary user.
    const denied = await asUser(65534, root, env, ['exec', '--no-prompt', '--', 'true']);
    expect(denied.code, denied.stderr).toBe(77);
    const key = path.join(state, 'secret', 'state.key');
    const st = await stat(key);
    expect({ uid: st.uid, mode: st.mode & 0o777, size: st.size }).toEqual({
      uid: 65534,
      mode: 0o600,
      size: 32,
    });
    expect((await asUser(65534, root, env, ['audit', 'verify'])).code).toBe(0);
    // Root pointed at that user's folder: refused, naming the file and the owner.
    const asRoot = await asUser(0, root, env, ['audit', 'verify', '--json']);
    expect(asRoot.code).toBe(78);
    expect(asRoot.stdout + asRoot.stderr).toContain(`belongs to uid 65534, not to this user (uid 0)`);
  }, 60_000);
});
