import { existsSync, readdirSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';
import { tempProject } from '../../helpers/capability.js';
import { builtCli } from '../../helpers/cli.js';

// Attacks on `capsule new` and the generate_* tools through the capability root: a repository whose
// root is a symlink out of the project, or whose capsule.json names a root outside it. Judged by what
// appears (or disappears) outside the project.

const entries = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir).sort() : []);

async function outside(): Promise<string> {
  return realpath(await mkdtemp(path.join(tmpdir(), 'capsule-redteam-outside-')));
}

describe('red team: capsule new and generate_* write only inside the project', () => {
  it('capsule new: a capability root that is a symlink out of the project gets nothing written', async () => {
    const { root, capRoot } = await tempProject('capsule-redteam-new-');
    const away = await outside();
    await writeFile(path.join(root, 'capsule.json'), '{}\n');
    await rm(capRoot, { recursive: true });
    await symlink(away, capRoot);
    const r = await builtCli(['new', 'x', '--env', 'shell', '--json'], { cwd: root });
    expect(r.code).not.toBe(0);
    expect(entries(away)).toEqual([]);
  });

  it('capsule new: a capsule.json root of ".." or an absolute folder gets nothing written', async () => {
    for (const where of ['..', 'abs']) {
      const { root } = await tempProject('capsule-redteam-new-');
      const away = await outside();
      const rootEntry = where === 'abs' ? away : path.relative(root, away);
      await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ roots: [rootEntry] }));
      const r = await builtCli(['new', 'x', '--env', 'shell', '--json'], { cwd: root });
      expect(r.code, rootEntry).not.toBe(0);
      expect(entries(away), rootEntry).toEqual([]);
    }
  });

  it('generate with overwrite: a symlinked root cannot replace (delete) a folder outside the project', async () => {
    const f = await agentFixture({ grants: ['generate_capability:shell'] });
    const away = await outside();
    await mkdir(path.join(away, 'victim'));
    await writeFile(path.join(away, 'victim', 'precious'), 'data\n');
    await rm(f.capRoot, { recursive: true });
    await symlink(away, f.capRoot);
    const code = await codeOf(
      f.session.call('generate_shell_capability', {
        name: 'victim',
        description: 'd',
        script: 'true\n',
        overwrite: true,
      }),
    );
    expect(code).toBe('PATH_ESCAPE');
    expect(entries(path.join(away, 'victim'))).toEqual(['precious']);
    expect(entries(away)).toEqual(['victim']);
  });
});
