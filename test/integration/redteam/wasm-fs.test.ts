import { readdirSync, readFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import wabtInit from 'wabt';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';

// Attacks on capsule's preview1 host over the confined folder layer: capsule's reserved names in other
// letter cases inside a granted folder, paths deeper than any limit, and symlinks out. Judged by what
// exists on disk afterwards (and by capsule not crashing: exit 70 is an internal error).

const wabt = await wabtInit();
const probe = wabt
  .parseWat('probe.wat', readFileSync(new URL('../../../fixtures/wasm/probe.wat', import.meta.url), 'utf8'))
  .toBinary({}).buffer;

const INTERNAL = 70;

/** Every path under `dir`, relative, recursively (symlinks listed, not followed). */
function tree(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const rel = prefix === '' ? e.name : `${prefix}/${e.name}`;
    out.push(rel);
    if (e.isDirectory()) out.push(...tree(path.join(dir, e.name), rel));
  }
  return out;
}

async function runProbe(args: string[]): Promise<{ root: string; code: number; stderr: string }> {
  const { root, capRoot } = await tempProject('capsule-redteam-wasmfs-');
  await mkdir(path.join(root, 'data'));
  await writeCapability(
    capRoot,
    'probe',
    {
      description: 'red team',
      environment: 'wasm',
      entry: 'probe.wasm',
      interpreter: undefined,
      args,
      grants: { fs: [{ path: 'data', mode: 'rw' }] },
    },
    { 'probe.wasm': probe },
  );
  const r = await cli(['run', 'probe', '--grant', 'run_capability:probe', '--no-prompt'], { cwd: root });
  return { root, code: r.code, stderr: r.stderr };
}

describe('red team: Wasm (preview1) file system', () => {
  it.each([
    ['dir', '.CAPSULE'],
    ['dir', '.Capsule'],
    ['write', 'CAPSULE.JSON'],
    ['write', 'Capsule.json'],
    ['write', '.capsule-Gen-x'],
    ['write', '.CAPSULE_state'],
    // U+017F folds to "s" on case-insensitive file systems (macOS): the same folder as `.capsule`.
    ['dir', '.cap\u017fule'],
    ['write', 'cap\u017fule.json'],
  ])('%s %s: capsule’s names in any letter case are never created in a granted folder', async (op, name) => {
    const { root, code } = await runProbe([op, name]);
    expect(code).not.toBe(INTERNAL);
    const made = tree(path.join(root, 'data'));
    expect(made.filter((p) => /(^|\/)(capsule\.json|\.capsule([-_.].*)?)$/iu.test(p))).toEqual([]);
  });

  it('control: the same probe creates an ordinary name in the grant (the harness sees a write)', async () => {
    const { root, code } = await runProbe(['dir', 'sub']);
    expect(code).toBe(0);
    expect(tree(path.join(root, 'data'))).toEqual(['sub']);
  });

  it('a path far deeper than PATH_MAX is refused without a crash, and nothing appears outside the grant', async () => {
    const deep = Array.from({ length: 3000 }, () => 'a').join('/');
    for (const op of ['dir', 'write', 'read']) {
      const { root, code, stderr } = await runProbe([op, deep]);
      expect(code, stderr).not.toBe(INTERNAL);
      expect(code).not.toBe(0);
      // capsule makes its own .capsule/ before a run; nothing else may appear.
      const outside = (p: string): boolean => !/^(capabilities|data|\.capsule)(\/|$)/.test(p);
      expect(tree(root).filter(outside)).toEqual([]);
    }
  });

  it('a symlink out of the grant (absolute, or up through "..") is never written through', async () => {
    for (const target of ['..', '../..', '/tmp', path.join('..', 'capabilities')]) {
      const made = await runProbe(['link', target, 'out']);
      expect(made.code).not.toBe(INTERNAL);
      expect(tree(path.join(made.root, 'data'))).toEqual([]);
    }
  });
});
