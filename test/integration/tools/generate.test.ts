import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';

const SCRIPT = 'read x; echo "got $x"\n';

describe('generate_* tools', () => {
  it('writes a complete shell capability that the registry sees at once, and reports its hash', async () => {
    const f = await agentFixture({ answers: ['Once', 'Once'] });
    const made = (await f.session.call('generate_shell_capability', {
      name: 'greet',
      description: 'says hi',
      script: SCRIPT,
      inputSchema: { type: 'object' },
      limits: { timeoutMs: 2000 },
    })) as { contentHash: string; dir: string; sandboxed: boolean };
    expect(made.contentHash).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(made.dir).toBe('capabilities/greet');
    expect(made.sandboxed).toBe(false);
    expect(f.asked()).toEqual(['generate_capability:shell']);
    const run = (await f.session.call('run_capability', { name: 'greet', input: { a: 1 } })) as {
      stdout: string;
    };
    expect(run.stdout).toBe('got {"a":1}\n');
    // No staging folder is left behind.
    expect(await readdir(f.capRoot)).toEqual(['greet']);
  });

  it('refuses to overwrite unless asked; a write grant does not cover it; with overwrite the hash changes', async () => {
    const f = await agentFixture({ grants: ['generate_capability:shell'], answers: ['Deny', 'Once'] });
    const args = { name: 'dup', description: 'one', script: 'echo 1\n' };
    const first = (await f.session.call('generate_shell_capability', args)) as { contentHash: string };
    expect(await codeOf(f.session.call('generate_shell_capability', { ...args, script: 'echo 2\n' }))).toBe(
      'ALREADY_EXISTS',
    );
    expect(await readFile(path.join(f.capRoot, 'dup', 'run.sh'), 'utf8')).toBe('echo 1\n');
    // The replacement is its own question (the session grant is for new folders): denied, unchanged.
    expect(
      await codeOf(
        f.session.call('generate_shell_capability', { ...args, script: 'echo 2\n', overwrite: true }),
      ),
    ).toBe('PERMISSION_DENIED');
    expect(await readFile(path.join(f.capRoot, 'dup', 'run.sh'), 'utf8')).toBe('echo 1\n');
    expect(f.asked()).toEqual(['generate_capability:shell:replace:dup']);
    const second = (await f.session.call('generate_shell_capability', {
      ...args,
      script: 'echo 2\n',
      overwrite: true,
    })) as {
      contentHash: string;
      replaced: boolean;
    };
    expect(second.replaced).toBe(true);
    expect(second.contentHash).not.toBe(first.contentHash);
    expect(await readFile(path.join(f.capRoot, 'dup', 'run.sh'), 'utf8')).toBe('echo 2\n');
    expect(await readdir(f.capRoot)).toEqual(['dup']);
  });

  it('cannot write capsule.json, the manifest, or outside the capability folder; nothing is left behind', async () => {
    const f = await agentFixture({ grants: ['generate_capability:shell', 'generate_capability:docker'] });
    const before = await readFile(path.join(f.root, 'capsule.json'), 'utf8');
    const attempts: Array<Record<string, unknown>> = [
      { files: { 'capsule.json': '{"allowlist":{}}' } },
      { files: { 'sub/capsule.json': '{}' } },
      { files: { 'capability.json': '{}' } },
      { files: { '../../capsule.json': '{}' } },
      { files: { '../evil/run.sh': 'x' } },
      { files: { '/etc/x': 'x' } },
      { name: '../evil' },
      { name: '.capsule' },
      { root: '.' },
      { root: '.capsule' },
      { root: '/tmp' },
    ];
    for (const extra of attempts) {
      const code = await codeOf(
        f.session.call('generate_shell_capability', {
          name: 'x1',
          description: 'd',
          script: 'true\n',
          ...extra,
        }),
      );
      expect(`${JSON.stringify(extra)} → ${code}`).toMatch(/→ (PATH_ESCAPE|USAGE)$/);
    }
    expect(
      await codeOf(
        f.session.call('generate_docker_capability', {
          name: 'x2',
          description: 'd',
          script: 'true\n',
          files: { 'capsule.json': '{}' },
        }),
      ),
    ).toBe('PATH_ESCAPE');
    expect(await readFile(path.join(f.root, 'capsule.json'), 'utf8')).toBe(before);
    expect(await readdir(f.capRoot)).toEqual([]);
    expect(existsSync(path.join(f.root, 'evil'))).toBe(false);
  });

  it('cannot grant a capability write access to capsule.json or .capsule/', async () => {
    const f = await agentFixture({ grants: ['generate_capability:shell'] });
    for (const p of ['capsule.json', '.capsule', '.']) {
      const code = await codeOf(
        f.session.call('generate_shell_capability', {
          name: 'sneaky',
          description: 'd',
          script: 'true\n',
          grants: { fs: [{ path: p, mode: 'rw' }] },
        }),
      );
      expect(`${p}: ${code}`).toBe(`${p}: MANIFEST_INVALID`);
    }
    expect(await readdir(f.capRoot)).toEqual([]);
  });

  it('cannot grant a generated capability write access to the capability root', async () => {
    const f = await agentFixture({ grants: ['generate_capability:shell'] });
    await mkdir(path.join(f.root, 'data'));
    const call = (name: string, grant: { path: string; mode: 'rw' }) =>
      f.session.call('generate_shell_capability', {
        name,
        description: 'd',
        script: 'true\n',
        grants: { fs: [grant] },
      });
    // `capabilities` holds its own folder once installed (a folder that does not exist yet, like
    // `capabilities/sneaky`, is refused as missing; while staged, the hidden staging folder in the
    // root is refused as capsule's state too: either way it never installs).
    const err = (await call('sneaky', { path: 'capabilities', mode: 'rw' }).catch((e: unknown) => e)) as {
      code?: string;
      details?: unknown;
    };
    expect(err.code).toBe('MANIFEST_INVALID');
    expect(JSON.stringify(err.details)).toContain('grants.fs[0].path');
    expect(await readdir(f.capRoot)).toEqual([]);
    // Control: a data folder is fine.
    expect(await codeOf(call('writer', { path: 'data', mode: 'rw' }))).toBe('resolved');
    expect(await readdir(f.capRoot)).toEqual(['writer']);
  });

  it('validates with the loader before the folder becomes visible', async () => {
    const f = await agentFixture({ grants: ['generate_capability:shell'] });
    const code = await codeOf(
      f.session.call('generate_shell_capability', {
        name: 'broken',
        description: 'bad schema',
        script: 'true\n',
        inputSchema: { type: 'no-such-type' },
      }),
    );
    expect(code).toBe('MANIFEST_INVALID');
    expect(await readdir(f.capRoot)).toEqual([]);
  });

  it('wasm: componentizes the JS at generate time (with progress) and stores source and artifact', async () => {
    const progress: string[] = [];
    const f = await agentFixture({
      grants: ['generate_capability:wasm'],
      componentize: async (source, options) => {
        options.onProgress?.('building');
        expect(source).toContain('export function run');
        return new Uint8Array([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0]);
      },
    });
    const made = (await f.session.call(
      'generate_wasm_capability',
      { name: 'up', description: 'upper', source: 'export function run(i) { return i.toUpperCase(); }' },
      { progress: (p) => progress.push(p.message) },
    )) as { environment: string; sandboxed: boolean };
    expect(made).toMatchObject({ environment: 'wasm', sandboxed: true });
    expect((await readdir(path.join(f.capRoot, 'up'))).sort()).toEqual([
      'capability.json',
      'capability.wasm',
      'source.js',
    ]);
    expect(progress).toContain('building');
    expect(progress.at(-1)).toBe('stored up');
  });

  it('wasm: a componentize failure names the source field and writes nothing', async () => {
    const f = await agentFixture({
      grants: ['generate_capability:wasm'],
      componentize: async () => {
        throw new Error('SyntaxError: unexpected token');
      },
    });
    await expect(
      f.session.call('generate_wasm_capability', {
        name: 'bad',
        description: 'd',
        source: 'export function run(',
      }),
    ).rejects.toThrow(/source: could not be turned into a Wasm component: SyntaxError/);
    expect(await readdir(f.capRoot)).toEqual([]);
  });

  it('docker: a runtime name maps to the locally built image', async () => {
    const f = await agentFixture({ grants: ['generate_capability:docker'] });
    await f.session.call('generate_docker_capability', {
      name: 'dk',
      description: 'd',
      script: 'cat\n',
      image: 'busybox',
    });
    const manifest = JSON.parse(await readFile(path.join(f.capRoot, 'dk', 'capability.json'), 'utf8'));
    expect(manifest.docker).toEqual({ image: 'capsule/busybox:1' });
  });

  it('plan mode denies generation with a message to present the plan', async () => {
    const f = await agentFixture({ grants: ['generate_capability:shell'] });
    await f.session.call('enter_plan_mode', {});
    await expect(
      f.session.call('generate_shell_capability', { name: 'p', description: 'd', script: 'true\n' }),
    ).rejects.toThrow(/exit_plan_mode/);
    expect(await readdir(f.capRoot)).toEqual([]);
  });
});
