import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { BUILT_CLI, builtCli, cli, REPO_ROOT } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { inTerminal } from '../../helpers/terminal.js';
import { connectCapsule } from '../mcp/mcp-client.js';

beforeAll(async () => {
  if (!existsSync(BUILT_CLI)) await execa('npm', ['run', 'build', '--silent'], { cwd: REPO_ROOT });
}, 300_000);

/** A real Claude Code settings file: allow, deny and ask; Bash, Read, Edit, WebFetch and capsule's MCP tool. */
const SETTINGS = {
  permissions: {
    allow: [
      'Bash(npm test:*)',
      'Read(./src/**)',
      'Edit(./src/**)',
      'WebFetch(domain:example.com)',
      'mcp__capsule__run_capability(w*)',
    ],
    deny: ['Bash(rm:*)', 'Edit(./secrets/**)', 'Read(./.env)', 'WebFetch(domain:evil.example)'],
    ask: ['Bash(git push:*)', 'Edit(./docs/**)'],
  },
  model: 'ignored',
};

interface ImportDoc {
  entries: Array<{ kind: string; text: string; outcome: string; rules: string[]; why: string }>;
  add: { allow: string[]; deny: string[] };
  diff: string[];
  written: boolean;
  message: string;
}

async function project(): Promise<{ root: string; capRoot: string; file: string; settings: string }> {
  const p = await tempProject('capsule-import-');
  const file = path.join(p.root, 'capsule.json');
  await writeFile(file, `${JSON.stringify({ schemaVersion: 1 }, null, 2)}\n`);
  await mkdir(path.join(p.root, '.claude'));
  const settings = path.join(p.root, '.claude', 'settings.json');
  await writeFile(settings, JSON.stringify(SETTINGS, null, 2));
  for (const dir of ['src', 'secrets', 'docs']) await mkdir(path.join(p.root, dir));
  return { ...p, file, settings };
}

async function wasmCapability(capRoot: string, name: string): Promise<void> {
  await writeCapability(capRoot, name, {
    environment: 'wasm',
    entry: `${name}.wasm`,
    interpreter: undefined,
  });
  await writeFile(path.join(capRoot, name, `${name}.wasm`), Buffer.from('\0asm\x01\0\0\0', 'latin1'));
}

const IMPORT = ['rules', 'import', '--claude-settings', '.claude/settings.json'];

async function explain(root: string, args: string[]): Promise<{ outcome: string; source: string }> {
  const r = await cli(['explain', '--json', ...args], { cwd: root });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as { outcome: string; source: string };
}

describe('capsule rules import --claude-settings', () => {
  it('without --write: shows what each rule becomes and the difference, writes nothing', async () => {
    const { root, file } = await project();
    const before = await readFile(file, 'utf8');
    const r = await cli([...IMPORT, '--json'], { cwd: root });
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as ImportDoc;
    const outcome = (text: string) => doc.entries.find((e) => e.text === text)?.outcome;
    expect(outcome('Bash(rm:*)')).toBe('import');
    expect(outcome('Edit(./secrets/**)')).toBe('import');
    expect(outcome('mcp__capsule__run_capability(w*)')).toBe('import');
    // Host tools: the ceiling forbids a project-level allow, so they are left out, said so.
    expect(outcome('Bash(npm test:*)')).toBe('left-out');
    expect(outcome('Edit(./src/**)')).toBe('left-out');
    expect(doc.entries.find((e) => e.text === 'Bash(npm test:*)')?.why).toContain('--grant run_command:npm');
    // No counterpart, with the reason.
    expect(outcome('Read(./.env)')).toBe('unmapped');
    expect(outcome('WebFetch(domain:example.com)')).toBe('unmapped');
    expect(outcome('WebFetch(domain:evil.example)')).toBe('unmapped');
    expect(outcome('Read(./src/**)')).toBe('nothing-to-do');
    expect(outcome('Bash(git push:*)')).toBe('nothing-to-do');
    expect(doc.add).toEqual({
      allow: ['run_capability(w*)'],
      deny: ['run_command(rm)', 'run_command(rm *)', 'write_file(secrets/**)'],
    });
    expect(doc.diff.length).toBeGreaterThan(0);
    expect(doc.written).toBe(false);
    expect(await readFile(file, 'utf8')).toBe(before);
  });

  it('--write without a yes writes nothing and says so: no terminal, --no-prompt (even with --yes)', async () => {
    const { root, file } = await project();
    const before = await readFile(file, 'utf8');
    const noTerminal = await cli([...IMPORT, '--write'], { cwd: root });
    expect(noTerminal.code).toBe(77);
    expect(noTerminal.stderr).toContain('Not written: no terminal');
    const noPrompt = await cli([...IMPORT, '--write', '--yes', '--no-prompt'], { cwd: root });
    expect(noPrompt.code).toBe(77);
    expect(noPrompt.stderr).toContain('--no-prompt never writes');
    const declined = await inTerminal(
      root,
      ['rules', 'import', '--claude-settings', '.claude/settings.json', '--write'],
      'n\n',
      {
        waitFor: '[y/N]',
      },
    );
    expect(declined.output).toContain('would change');
    expect(declined.code).toBe(77);
    expect(await readFile(file, 'utf8')).toBe(before);
  });

  it('after a yes at the terminal, capsule judges commands as the imported rules say; deny rules hold by effect', async () => {
    const { root, capRoot, file } = await project();
    for (const name of ['w1', 'x1']) await wasmCapability(capRoot, name);
    await writeFile(path.join(root, 'victim'), 'keep me');
    const yes = await inTerminal(
      root,
      ['rules', 'import', '--claude-settings', '.claude/settings.json', '--write'],
      'y\n',
      {
        waitFor: '[y/N]',
      },
    );
    expect(yes.code, yes.output).toBe(0);
    const saved = JSON.parse(await readFile(file, 'utf8')) as {
      permissions: { allow: string[]; deny: string[] };
    };
    expect(saved.permissions.deny).toEqual([
      'run_command(rm)',
      'run_command(rm *)',
      'write_file(secrets/**)',
    ]);
    // Never widened: no host allow reached the file.
    expect(saved.permissions.allow).toEqual(['run_capability(w*)']);

    // Bash(rm:*) deny: refused even with a grant of rm or in bypass mode, and through a wrapper.
    for (const args of [
      ['--grant', 'run_command:rm', '--', 'rm victim'],
      ['--mode', 'bypass', '--', 'rm -f victim'],
      ['--mode', 'bypass', '--', 'env rm victim'],
    ]) {
      const r = await builtCli(['exec', '--no-prompt', ...args], { cwd: root });
      expect(r.code, args.join(' ')).toBe(77);
    }
    expect(await readFile(path.join(root, 'victim'), 'utf8')).toBe('keep me');
    expect(await explain(root, ['--', 'rm -rf src'])).toMatchObject({ outcome: 'deny', source: 'deny-rule' });
    // Bash(npm test:*) allow was left out: capsule still asks (Claude would not); an ask rule asks.
    expect((await explain(root, ['--', 'npm test'])).outcome).toBe('ask');
    expect((await explain(root, ['--', 'git push origin main'])).outcome).toBe('ask');
    // The imported allow: matching sandboxed capabilities are allowed, others asked.
    expect(await explain(root, ['--capability', 'w1'])).toMatchObject({
      outcome: 'allow',
      source: 'allow-rule',
    });
    expect((await explain(root, ['--capability', 'x1'])).outcome).toBe('ask');

    // Edit(./secrets/**) deny, through the real MCP client in edit mode (edits allowed by the mode).
    const h = await connectCapsule({ cwd: root, args: ['--mode', 'edit', '--no-prompt'] });
    try {
      await h.client.callTool({ name: 'write_file', arguments: { path: 'secrets/key', content: 'x' } });
      await h.client.callTool({ name: 'write_file', arguments: { path: 'src/ok.ts', content: 'x' } });
    } finally {
      await h.close();
    }
    expect(existsSync(path.join(root, 'secrets', 'key'))).toBe(false);
    expect(existsSync(path.join(root, 'src', 'ok.ts'))).toBe(true);

    // Imported again: nothing to write.
    const again = await cli([...IMPORT, '--write', '--yes', '--json'], { cwd: root });
    expect(again.code).toBe(0);
    expect((JSON.parse(again.stdout) as ImportDoc).message).toBe('Nothing to write.');
  });

  it('control: without the import the same calls delete the victim and write the secret', async () => {
    const { root } = await project();
    await writeFile(path.join(root, 'victim'), 'keep me');
    const r = await builtCli(['exec', '--no-prompt', '--grant', 'run_command:rm', '--', 'rm victim'], {
      cwd: root,
    });
    expect(r.code).toBe(0);
    expect(existsSync(path.join(root, 'victim'))).toBe(false);
    const h = await connectCapsule({ cwd: root, args: ['--mode', 'edit', '--no-prompt'] });
    try {
      await h.client.callTool({ name: 'write_file', arguments: { path: 'secrets/key', content: 'x' } });
    } finally {
      await h.close();
    }
    expect(existsSync(path.join(root, 'secrets', 'key'))).toBe(true);
  });

  it('--yes writes, and a policy confirmed before takes the rules too; a capsule.json that does not parse is never overwritten', async () => {
    const { root, capRoot, file } = await project();
    await wasmCapability(capRoot, 'w1');
    // An agent session first: the policy as it was is recorded as the confirmed one.
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-import-state-'));
    const env = { CAPSULE_STATE_DIR: state };
    await (await connectCapsule({ cwd: root, env, args: ['--no-prompt'] })).close();
    const ok = await cli([...IMPORT, '--write', '--yes'], { cwd: root, env: { ...process.env, ...env } });
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stderr).toContain('Written: 3 deny and 1 allow rule(s)');
    // The person's yes covers the imported rules: the next session is not held back by the old record.
    const h = await connectCapsule({ cwd: root, env, args: ['--no-prompt'] });
    try {
      const r = await h.client.callTool({ name: 'run_capability', arguments: { name: 'w1' } });
      expect(JSON.stringify(r.content)).not.toContain('PERMISSION_DENIED');
      expect(h.stderr()).not.toContain('changed since a person last confirmed');
    } finally {
      await h.close();
    }
    const broken = '{ "schemaVersion": 1, ';
    await writeFile(file, broken);
    const r = await cli([...IMPORT, '--write', '--yes'], { cwd: root });
    expect(r.code).toBe(78);
    expect(await readFile(file, 'utf8')).toBe(broken);
  });

  it('bad input: no file, a missing file, a file that is not JSON or has no permissions block', async () => {
    const { root } = await project();
    const none = await cli(['rules', 'import'], { cwd: root });
    expect(none.code).toBe(64);
    expect(none.stderr).toContain('--claude-settings');
    const missing = await cli(['rules', 'import', '--claude-settings', 'nope.json'], { cwd: root });
    expect(missing.code).toBe(66);
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-settings-'));
    await writeFile(path.join(dir, 'a.json'), 'not json');
    await writeFile(path.join(dir, 'b.json'), '{"permissions": {"allow": "Bash"}}');
    for (const f of ['a.json', 'b.json']) {
      const r = await cli(['rules', 'import', '--claude-settings', path.join(dir, f)], { cwd: root });
      expect(r.code, f).toBe(64);
      expect(r.stderr).toContain(f);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  });
});
