import { existsSync } from 'node:fs';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { builtCli, cli, REPO_ROOT } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';

const HOSTILE = path.join(REPO_ROOT, 'fixtures', 'hostile');

describe('capsule CLI', () => {
  it('lists the shipped capabilities, as a table and as JSON', async () => {
    const table = await cli(['list']);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^NAME\s+ENV\s+DESCRIPTION/);
    expect(table.stdout).toMatch(/word-count\s+shell/);
    const asJson = await cli(['list', '--json']);
    const doc = JSON.parse(asJson.stdout) as {
      capabilities: Array<{ name: string; contentHash: string }>;
      invalid: unknown[];
    };
    expect(doc.capabilities.map((c) => c.name)).toContain('shout');
    expect(doc.capabilities[0]?.contentHash).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(doc.invalid).toEqual([]);
  });

  it('shows one capability with its permission key and isolation', async () => {
    const r = await cli(['show', 'word-count']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('permission:  run_capability:word-count');
    expect(r.stdout).toContain('not a sandbox');
    expect((await cli(['show', 'nope'])).code).toBe(66);
  });

  it('validates the shipped capabilities', async () => {
    const r = await cli(['validate']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^ok\s+shout/m);
  });

  it("runs a capability with a grant: output passes through, exit code is the capability's", async () => {
    const r = await cli([
      'run',
      'word-count',
      '--grant',
      'run_capability:word-count',
      '--input',
      '{"text":"one two\\nthree"}',
    ]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ lines: 2, words: 3, chars: 13 });
  });

  it('denies without a grant (exit 77, names the key and how to allow it) and never runs', async () => {
    const { root, capRoot } = await tempProject();
    const marker = path.join(root, 'ran');
    await writeCapability(capRoot, 'touchy', { args: [marker] }, { 'run.sh': 'touch "$1"\n' });
    const r = await cli(['run', 'touchy', '--no-prompt'], { cwd: root });
    expect(r.code).toBe(77);
    expect(r.stderr).toContain('run_capability:touchy');
    expect(r.stderr).toContain('--grant run_capability:touchy');
    expect(existsSync(marker)).toBe(false);
    // A grant for another key does not help.
    expect((await cli(['run', 'touchy', '--grant', 'run_capability:other'], { cwd: root })).code).toBe(77);
    expect(existsSync(marker)).toBe(false);
  });

  it('rejects input that fails the input schema before anything runs (exit 65)', async () => {
    const { root, capRoot } = await tempProject();
    const marker = path.join(root, 'ran');
    await writeCapability(
      capRoot,
      'typed',
      {
        args: [marker],
        inputSchema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
      },
      { 'run.sh': 'touch "$1"\n' },
    );
    const grant = ['--grant', 'run_capability:typed'];
    const wrong = await cli(['run', 'typed', ...grant, '--input', '{"n":"seven"}'], { cwd: root });
    expect(wrong.code).toBe(65);
    expect(wrong.stderr).toMatch(/input\.n must be integer/);
    const notJson = await cli(['run', 'typed', ...grant, '--input', '{n:'], { cwd: root });
    expect(notJson.code).toBe(65);
    expect(notJson.stderr).toMatch(/not valid JSON/);
    expect(existsSync(marker)).toBe(false);
    const ok = await cli(['run', 'typed', ...grant, '--input', '{"n":7}'], { cwd: root });
    expect(ok.code).toBe(0);
    expect(existsSync(marker)).toBe(true);
  });

  it('maps timeouts to exit 124 with a note naming the limit', async () => {
    const { root, capRoot } = await tempProject();
    await writeCapability(capRoot, 'sleepy', { limits: { timeoutMs: 200 } }, { 'run.sh': 'sleep 20\n' });
    const r = await cli(['run', 'sleepy', '--grant', 'run_capability:sleepy'], { cwd: root });
    expect(r.code).toBe(124);
    expect(r.stderr).toContain('limits.timeoutMs');
  });

  it('finds the project root from a subdirectory (nearest capsule.json)', async () => {
    const { root, capRoot } = await tempProject();
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ roots: ['capabilities'] }));
    await writeCapability(capRoot, 'here', {}, { 'run.sh': 'echo here\n' });
    const r = await cli(['list', '--json'], { cwd: capRoot });
    expect(JSON.parse(r.stdout).capabilities.map((c: { name: string }) => c.name)).toEqual(['here']);
  });

  it('reports a malformed capsule.json clearly and leaves it untouched', async () => {
    const { root } = await tempProject();
    const file = path.join(root, 'capsule.json');
    await writeFile(file, '{ "roots": [ ');
    const r = await cli(['list'], { cwd: root });
    expect(r.code).toBe(78);
    expect(r.stderr).toContain(`${file} is not valid JSON`);
    expect(await readFile(file, 'utf8')).toBe('{ "roots": [ ');
  });

  it('answers usage errors with exit 64 and help with 0', async () => {
    expect((await cli(['run'])).code).toBe(64);
    expect((await cli(['frobnicate'])).code).toBe(64);
    expect((await cli(['run', 'x', '--mode', 'yolo'])).code).toBe(64);
    const help = await cli(['run', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('--grant <key>');
  });

  describe('hostile manifests', async () => {
    const cases = (await readdir(HOSTILE)).sort();
    it.each(cases)('validate %s exits 1 naming file and reason; run refuses it', async (name) => {
      const dir = path.join(HOSTILE, name);
      const v = await cli(['validate', dir]);
      expect(v.code).toBe(1);
      expect(v.stderr).toContain(`invalid ${name}`);
      expect(v.stderr).toMatch(new RegExp(`${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\S*: `));
      const asJson = JSON.parse((await cli(['validate', dir, '--json'])).stdout) as {
        invalid: Array<{ issues: unknown[] }>;
      };
      expect(asJson.invalid[0]?.issues.length).toBeGreaterThan(0);

      const { root } = await tempProject();
      await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ roots: [HOSTILE] }));
      const r = await cli(['run', name, '--grant', `run_capability:${name}`], { cwd: root });
      expect(r.code).not.toBe(0);
      expect(existsSync(path.join(dir, 'ran-marker'))).toBe(false);
    });

    it('names the field for the field-level cases', async () => {
      const fieldOf = async (name: string): Promise<string[]> => {
        const doc = JSON.parse((await cli(['validate', path.join(HOSTILE, name), '--json'])).stdout) as {
          invalid: Array<{ issues: Array<{ field?: string }> }>;
        };
        return doc.invalid.flatMap((i) => i.issues.map((x) => x.field ?? ''));
      };
      expect(await fieldOf('unknown-schema-version')).toContain('schemaVersion');
      expect(await fieldOf('unknown-field')).toContain('privileges');
      expect(await fieldOf('name-long')).toContain('name');
      expect(await fieldOf('entry-dotdot')).toContain('entry');
      expect(await fieldOf('entry-absolute')).toContain('entry');
      expect(await fieldOf('entry-symlink')).toContain('entry');
      expect(await fieldOf('grant-escape')).toContain('grants.fs[0].path');
      expect(await fieldOf('grant-config-rw')).toContain('grants.fs[0].path');
      expect(await fieldOf('bad-input-schema')).toContain('inputSchema');
    });
  });

  it("the built binary runs and exits with the capability's code", async () => {
    const r = await builtCli(['run', 'shout', '--grant', 'run_capability:shout', '--input', '{"msg":"hi"}']);
    expect(r.stdout).toBe('{"MSG":"HI"}');
    expect(r.code).toBe(0);
    const denied = await builtCli(['run', 'shout']);
    expect(denied.code).toBe(77);
  });
});
