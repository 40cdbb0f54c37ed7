import { chmod, lstat, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SANDBOX_IMAGES } from '../../../src/runners/docker/image-recipes.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { builtCli } from '../../helpers/cli.js';

// Attacks on hard links between two grants of a Docker capability: a script given a ro grant and two rw
// grants tries to give a file of one a second name in another. Each grant is a bind mount of its own, and
// the kernel refuses link(2) (and rename(2)) between two mounts with EXDEV, whatever file system is below,
// so no host file gains a name in another grant. Judged by every host file's link count, inode and bytes.

const SCRIPT = `
try() { if out=$("$@" 2>&1); then echo "ok $*"; else echo "refused $*: $out"; fi; }
cd /project
try ln a/secret.txt b/hl
try ln a/secret.txt c/hl
try ln c/mine.txt b/hl
try ln b/own.txt c/hl
try ln b/own.txt a/hl
# the control: a link within one rw grant
try ln b/own.txt b/own-link.txt
`;

interface Entry {
  ino: number;
  nlink: number;
  bytes: string;
}

async function entries(dir: string): Promise<Record<string, Entry>> {
  const out: Record<string, Entry> = {};
  for (const name of await readdir(dir)) {
    const st = await lstat(path.join(dir, name));
    out[name] = { ino: st.ino, nlink: st.nlink, bytes: await readFile(path.join(dir, name), 'utf8') };
  }
  return out;
}

describe('red team: Docker links between two grants', () => {
  it('ln across grants is refused by the kernel (separate mounts); no host file gains a link', async () => {
    const { root, capRoot } = await tempProject('capsule-redteam-dockerlinks-');
    for (const g of ['a', 'b', 'c']) {
      await mkdir(path.join(root, g));
      // The sandbox user (65534) writes the rw grants.
      await chmod(path.join(root, g), 0o777);
    }
    await writeFile(path.join(root, 'a', 'secret.txt'), 'granted read-only\n');
    await writeFile(path.join(root, 'b', 'own.txt'), 'b\n');
    await writeFile(path.join(root, 'c', 'mine.txt'), 'c\n');
    // Readable and writable by the sandbox user, so fs.protected_hardlinks does not refuse the links:
    // what is left to refuse them is the mount boundary (the control below shows links work otherwise).
    for (const f of ['a/secret.txt', 'b/own.txt', 'c/mine.txt']) await chmod(path.join(root, f), 0o666);
    await writeCapability(
      capRoot,
      'linker',
      {
        description: 'red team',
        environment: 'docker',
        docker: { image: SANDBOX_IMAGES.busybox },
        grants: {
          fs: [
            { path: 'a', mode: 'ro' },
            { path: 'b', mode: 'rw' },
            { path: 'c', mode: 'rw' },
          ],
        },
      },
      { 'run.sh': SCRIPT },
    );
    const before = { a: await entries(path.join(root, 'a')), c: await entries(path.join(root, 'c')) };
    const r = await builtCli(['run', 'linker', '--grant', 'run_capability:linker'], { cwd: root });
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines.map((l) => l.replace(/:.*/, ''))).toEqual([
      'refused ln a/secret.txt b/hl',
      'refused ln a/secret.txt c/hl',
      'refused ln c/mine.txt b/hl',
      'refused ln b/own.txt c/hl',
      'refused ln b/own.txt a/hl',
      'ok ln b/own.txt b/own-link.txt',
    ]);
    for (const l of lines.slice(0, 4)) expect(l).toMatch(/cross-device/i);
    // By effect: a and c as they were, b holds only its own file and the control's second name of it.
    expect({ a: await entries(path.join(root, 'a')), c: await entries(path.join(root, 'c')) }).toEqual(
      before,
    );
    const b = await entries(path.join(root, 'b'));
    expect(Object.keys(b).sort()).toEqual(['own-link.txt', 'own.txt']);
    expect(b['own-link.txt']?.ino).toBe(b['own.txt']?.ino);
    expect(before.a['secret.txt']?.nlink).toBe(1);
    expect(before.c['mine.txt']?.nlink).toBe(1);
  });
});
