import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, REPO_ROOT } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';

interface Listed {
  key: string;
  flags: string[];
  problem?: string;
}

async function project(
  allowlist: (hashes: Record<string, string>) => Record<string, unknown>,
): Promise<string> {
  const { root, capRoot } = await tempProject('capsule-grants-');
  await writeCapability(capRoot, 'sh-tool', {}, { 'run.sh': 'cat\n' });
  const from = path.join(REPO_ROOT, 'capabilities', 'shout-wasm');
  await mkdir(path.join(capRoot, 'shout-wasm'));
  for (const f of ['capability.json', 'shout.wasm'])
    await copyFile(path.join(from, f), path.join(capRoot, 'shout-wasm', f));
  const hashes: Record<string, string> = {};
  const listed = await cli(['list', '--json'], { cwd: root });
  for (const c of JSON.parse(listed.stdout).capabilities as Array<{ name: string; contentHash: string }>)
    hashes[c.name] = c.contentHash;
  await writeFile(
    path.join(root, 'capsule.json'),
    JSON.stringify({ schemaVersion: 1, allowlist: allowlist(hashes) }),
  );
  return root;
}

const STALE = `sha256:${'b'.repeat(64)}`;

describe('capsule grants list flags what a hand edit got wrong', () => {
  it('over-broad, host-side, stale, unbound and missing entries are flagged; a sound one is not', async () => {
    const root = await project((h) => ({
      'write_file:**': 'AlwaysThisProject',
      'generate_capability:*': 'AlwaysThisProject',
      'run_capability:*': 'AlwaysThisProject',
      'run_command:*': { level: 'AlwaysThisProject', contentHash: STALE },
      'run_capability:sh-tool': { level: 'AlwaysThisProject', contentHash: h['sh-tool'] },
      'run_capability:shout-wasm': { level: 'AlwaysThisProject', contentHash: h['shout-wasm'] },
      'run_capability:gone': { level: 'AlwaysThisProject', contentHash: STALE },
      'run_capability:nuke': 'Deny',
      'run_command:rm': 'Deny',
    }));
    const r = await cli(['grants', 'list', '--json'], { cwd: root });
    expect(r.code).toBe(0);
    const entries = new Map((JSON.parse(r.stdout).entries as Listed[]).map((e) => [e.key, e]));
    const flags = (k: string): string[] => entries.get(k)?.flags ?? ['<missing>'];
    expect(flags('write_file:**')).toEqual(expect.arrayContaining(['over-broad', 'ceiling']));
    expect(flags('generate_capability:*')).toEqual(expect.arrayContaining(['over-broad', 'ceiling']));
    expect(flags('run_capability:*')).toEqual(expect.arrayContaining(['over-broad']));
    expect(flags('run_command:*')).toEqual(expect.arrayContaining(['over-broad', 'ceiling']));
    expect(flags('run_capability:sh-tool')).toEqual(['ceiling']);
    expect(flags('run_capability:shout-wasm')).toEqual([]);
    expect(flags('run_capability:gone')).toEqual(['missing']);
    expect(flags('run_capability:nuke')).toEqual([]);
    expect(flags('run_command:rm')).toEqual([]);

    const text = await cli(['grants', 'list'], { cwd: root });
    const block = (key: string): string => {
      const lines = text.stdout.split('\n');
      const i = lines.findIndex((l) => l.includes(`  ${key}`));
      return [
        lines[i],
        ...lines
          .slice(i + 1)
          .filter((_, j, rest) => rest.slice(0, j + 1).every((l) => l.trim().startsWith('!'))),
      ].join('\n');
    };
    expect(block('write_file:**')).toMatch(/!.*(over-broad|every)/);
    expect(block('run_capability:sh-tool')).toMatch(/! .*ceiling/);
    expect(block('run_capability:shout-wasm')).not.toContain('!');
  });

  it('a capability that changed since its grant is flagged stale', async () => {
    const root = await project(() => ({
      'run_capability:shout-wasm': { level: 'AlwaysThisProject', contentHash: STALE },
    }));
    const r = await cli(['grants', 'list', '--json'], { cwd: root });
    const [e] = JSON.parse(r.stdout).entries as Listed[];
    expect(e?.flags).toEqual(['stale']);
    expect((await cli(['grants', 'list'], { cwd: root })).stdout).toMatch(/! .*stale/);
  });
});
