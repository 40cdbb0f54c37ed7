import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { appendFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { BUILT_CLI, builtCli, cli, REPO_ROOT } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { inTerminal } from '../../helpers/terminal.js';

const run = promisify(execFile);

beforeAll(async () => {
  // These tests drive the built binary; build it when this checkout has not been built.
  if (!existsSync(BUILT_CLI)) {
    await execa('npm', ['run', 'build', '--silent'], { cwd: REPO_ROOT });
  }
}, 300_000);

async function project(config: unknown = {}): Promise<{ root: string; capRoot: string; file: string }> {
  const p = await tempProject('capsule-permcli-');
  const file = path.join(p.root, 'capsule.json');
  await writeFile(file, typeof config === 'string' ? config : JSON.stringify(config, null, 2));
  return { ...p, file };
}

async function wasmCapability(capRoot: string, name: string, bytes = '\0asm\x01\0\0\0'): Promise<void> {
  await writeCapability(capRoot, name, {
    environment: 'wasm',
    entry: `${name}.wasm`,
    interpreter: undefined,
  });
  await writeFile(path.join(capRoot, name, `${name}.wasm`), Buffer.from(bytes, 'latin1'));
}

interface ExplainDoc {
  request: { key: string; contentHash?: string; sandboxed: boolean };
  outcome: string;
  source: string;
  options?: string[];
  trace: Array<{ detail: string }>;
}

async function explainCapability(cwd: string, name: string): Promise<ExplainDoc> {
  const r = await cli(['explain', '--capability', name, '--json'], { cwd });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as ExplainDoc;
}

describe('capsule exec / key through the built CLI', () => {
  it("exec --grant run_command:git --no-prompt -- 'git status && touch X' exits 77 and X does not exist", async () => {
    const { root } = await project();
    const r = await builtCli(
      ['exec', '--grant', 'run_command:git', '--no-prompt', '--', 'git status && touch X'],
      {
        cwd: root,
      },
    );
    expect(r.code).toBe(77);
    expect(r.stderr).toContain('run_command:git status && touch X');
    expect(r.stderr).toContain("--grant 'run_command:git status && touch X'");
    expect(existsSync(path.join(root, 'X'))).toBe(false);
  });

  it('a granted simple command runs: output and exit code pass through', async () => {
    const { root } = await project();
    const ok = await builtCli(['exec', '--grant', 'run_command:git', '--no-prompt', '--', 'git --version'], {
      cwd: root,
    });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^git version /);
    const failing = await builtCli(
      // sh -c runs shell code: only the exact command is granted, never `sh` as a program.
      [
        'exec',
        '--grant',
        'run_command:sh -c "echo out; echo err >&2; exit 5"',
        '--',
        'sh -c "echo out; echo err >&2; exit 5"',
      ],
      {
        cwd: root,
      },
    );
    expect(failing).toMatchObject({ code: 5, stdout: 'out', stderr: 'err' });
  });

  it('with no TTY and no --no-prompt, Ask is a denial (never a hang)', async () => {
    const { root } = await project();
    const r = await builtCli(['exec', '--', 'touch Y'], { cwd: root });
    expect(r.code).toBe(77);
    expect(existsSync(path.join(root, 'Y'))).toBe(false);
  });

  it('plan mode denies with the reason for the agent', async () => {
    const { root } = await project();
    const r = await builtCli(['exec', '--grant', 'run_command:touch', '--mode', 'plan', '--', 'touch Y'], {
      cwd: root,
    });
    expect(r.code).toBe(77);
    expect(r.stderr).toMatch(/^allow it: run with --mode default/m);
    expect(existsSync(path.join(root, 'Y'))).toBe(false);
  });

  it('key --json prints exactly the contract', async () => {
    const simple = await builtCli(['key', '--json', '--', 'git commit -m "a && b"']);
    expect(simple.stdout).toBe('{"tool":"run_command","key":"run_command:git","compound":false}');
    const compound = await builtCli(['key', '--json', '--', 'git  status &&  touch X']);
    expect(compound.stdout).toBe(
      '{"tool":"run_command","key":"run_command:git status && touch X","compound":true}',
    );
    const readable = await builtCli(['key', '--', 'ls | wc']);
    expect(readable.stdout).toContain('run_command:ls | wc');
    expect(readable.stdout).toContain('compound');
  });
});

describe('capsule.json at the project level', () => {
  it('a hand-edited shell key → CEILING_VIOLATION naming the file and the key, the command never runs', async () => {
    const { root, file } = await project({ allowlist: { 'run_command:touch': 'AlwaysThisProject' } });
    const r = await builtCli(['exec', '--no-prompt', '--', 'touch Y'], { cwd: root });
    expect(r.code).toBe(77);
    expect(r.stderr).toContain(file);
    expect(r.stderr).toContain('run_command:touch');
    expect(r.stderr).toMatch(/session allowlist at most/);
    expect(existsSync(path.join(root, 'Y'))).toBe(false);
  });

  it('malformed capsule.json: a clear error naming the file; nothing overwritten, nothing run', async () => {
    const broken = '{ "allowlist": { "run_capability:w": "AlwaysThisProject", }';
    const { root, file } = await project(broken);
    const r = await builtCli(['exec', '--grant', 'run_command:touch', '--', 'touch Y'], { cwd: root });
    expect(r.code).toBe(78);
    expect(r.stderr).toContain(file);
    expect(r.stderr).toContain('not valid JSON');
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    const revoke = await cli(['grants', 'revoke', 'run_capability:w'], { cwd: root });
    expect(revoke.code).toBe(78);
    expect(await readFile(file, 'utf8')).toBe(broken);
    expect(existsSync(path.join(root, 'Y'))).toBe(false);
  });

  it('a wasm capability approved for the project, then re-generated as shell under the same name, loses the grant', async () => {
    const { root, capRoot, file } = await project();
    await wasmCapability(capRoot, 'tool');
    const before = await explainCapability(root, 'tool');
    expect(before.request.sandboxed).toBe(true);
    expect(before.options).toContain('AlwaysThisProject');
    await writeFile(
      file,
      JSON.stringify({
        allowlist: {
          'run_capability:tool': { level: 'AlwaysThisProject', contentHash: before.request.contentHash },
        },
      }),
    );
    expect(await explainCapability(root, 'tool')).toMatchObject({
      outcome: 'allow',
      source: 'project-allowlist',
    });

    await rm(path.join(capRoot, 'tool'), { recursive: true });
    const marker = path.join(root, 'RAN');
    await writeCapability(capRoot, 'tool', {}, { 'run.sh': `#!/bin/sh\ntouch ${marker}\n` });
    const after = await explainCapability(root, 'tool');
    expect(after.request.sandboxed).toBe(false);
    // The entry now covers host code: a ceiling violation whatever its hash, until it is revoked.
    expect(after.outcome).toBe('error');
    expect((after as ExplainDoc & { error?: { code: string } }).error?.code).toBe('CEILING_VIOLATION');
    const r = await builtCli(['run', 'tool', '--no-prompt'], { cwd: root });
    expect(r.code).toBe(77);
    expect(existsSync(marker)).toBe(false);
    expect((await cli(['grants', 'revoke', 'run_capability:tool'], { cwd: root })).code).toBe(0);
    const revoked = await explainCapability(root, 'tool');
    expect(revoked.outcome).toBe('ask');
    expect(revoked.options).not.toContain('AlwaysThisProject');
    expect((await builtCli(['run', 'tool', '--no-prompt'], { cwd: root })).code).toBe(77);
    expect(existsSync(marker)).toBe(false);
  });

  it('a capability whose code changes after approval is asked again', async () => {
    const { root, capRoot, file } = await project();
    await wasmCapability(capRoot, 'w');
    const approved = await explainCapability(root, 'w');
    await writeFile(
      file,
      JSON.stringify({
        allowlist: {
          'run_capability:w': { level: 'AlwaysThisProject', contentHash: approved.request.contentHash },
        },
      }),
    );
    expect((await explainCapability(root, 'w')).outcome).toBe('allow');
    await appendFile(path.join(capRoot, 'w', 'w.wasm'), Buffer.from([0, 4, 110, 97, 109, 101]));
    const changed = await explainCapability(root, 'w');
    expect(changed.request.contentHash).not.toBe(approved.request.contentHash);
    expect(changed.outcome).toBe('ask');
  });

  it('grants list flags a broken entry; revoke removes it atomically', async () => {
    const { root, file } = await project({
      roots: ['capabilities'],
      allowlist: { 'run_command:git': 'AlwaysThisProject', 'run_capability:x': 'Deny' },
    });
    const list = await cli(['grants', 'list'], { cwd: root });
    expect(list.code).toBe(0);
    expect(list.stdout).toContain('breaks the ceiling rule');
    expect((await cli(['grants', 'revoke', 'run_command:git'], { cwd: root })).code).toBe(0);
    expect((await cli(['grants', 'revoke', 'run_command:git'], { cwd: root })).code).toBe(66);
    const saved = JSON.parse(await readFile(file, 'utf8')) as { roots: string[]; allowlist: object };
    expect(saved).toEqual({ roots: ['capabilities'], allowlist: { 'run_capability:x': 'Deny' } });
  });

  it('concurrent "always" answers from several processes: no lost update, no torn file', async () => {
    const { file } = await project({ roots: ['capabilities'] });
    const store = path.join(REPO_ROOT, 'dist', 'project', 'config-store.js');
    const script = `
      const { setAllowlistEntry } = await import(${JSON.stringify(store)});
      const [file, id] = process.argv.slice(1);
      await Promise.all(Array.from({ length: 8 }, (_, i) =>
        setAllowlistEntry(file, 'run_capability:p' + id + '-' + i, { level: 'AlwaysThisProject', contentHash: 'sha256:' + 'c'.repeat(64) })));
    `;
    const procs = Array.from({ length: 6 }, (_, id) =>
      run(process.execPath, ['--input-type=module', '-e', script, file, String(id)]),
    );
    await Promise.all(procs);
    const saved = JSON.parse(await readFile(file, 'utf8')) as { allowlist: Record<string, unknown> };
    expect(Object.keys(saved.allowlist)).toHaveLength(48);
    const lockDir = path.join(path.dirname(file), '.capsule', 'locks');
    expect(existsSync(path.join(lockDir, 'capsule.json.lock'))).toBe(false);
  });
});

describe('capsule audit verify', () => {
  it('an intact log verifies; an edited line is found', async () => {
    const { root } = await project();
    await builtCli(['exec', '--grant', 'run_command:true', '--', 'true'], { cwd: root });
    await builtCli(['exec', '--no-prompt', '--', 'rm -rf /tmp/nothing-here'], { cwd: root });
    const ok = await cli(['audit', 'verify'], { cwd: root });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('2 record(s)');
    const log = path.join(root, '.capsule', 'audit.jsonl');
    const text = await readFile(log, 'utf8');
    await writeFile(log, text.replace('"decision":"deny"', '"decision":"allow"'));
    const bad = await cli(['audit', 'verify'], { cwd: root });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('line 2');
  });
});

describe('--grant validation', () => {
  it('a run_command grant with arguments is refused with the key to use', async () => {
    const { root } = await project();
    await mkdir(path.join(root, 'sub'));
    const r = await cli(['exec', '--grant', 'run_command:git status', '--', 'git status'], {
      cwd: path.join(root, 'sub'),
    });
    expect(r.code).toBe(64);
    expect(r.stderr).toContain('run_command:git');
    expect(BUILT_CLI).toBeTruthy();
  });
});

describe('the interactive terminal prompt (a real pseudo-terminal)', () => {
  it('once runs the command; deny exits 77 and it does not run', async () => {
    const { root } = await project();
    const yes = await inTerminal(root, ['exec', '--', 'touch Y'], 'o\n');
    expect(yes.code).toBe(0);
    expect(yes.output).toContain('[o] once  [s] this session  [d] deny');
    expect(yes.output).not.toContain('[p]');
    expect(existsSync(path.join(root, 'Y'))).toBe(true);
    const no = await inTerminal(root, ['exec', '--', 'touch Z'], 'd\n');
    expect(no.code).toBe(77);
    expect(existsSync(path.join(root, 'Z'))).toBe(false);
  });

  it('"this project" for a wasm capability writes a hash-bound entry to capsule.json', async () => {
    const { root, capRoot, file } = await project({ roots: ['capabilities'] });
    await wasmCapability(capRoot, 'w');
    const { request } = await explainCapability(root, 'w');
    const r = await inTerminal(root, ['run', 'w'], 'p\n');
    expect(r.output).toContain('[p] this project');
    const saved = JSON.parse(await readFile(file, 'utf8')) as {
      allowlist: Record<string, { contentHash?: string }>;
    };
    expect(saved.allowlist['run_capability:w']).toMatchObject({
      level: 'AlwaysThisProject',
      contentHash: request.contentHash,
    });
    expect(await explainCapability(root, 'w')).toMatchObject({
      outcome: 'allow',
      source: 'project-allowlist',
    });
  });
});
