import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, REPO_ROOT } from '../../helpers/cli.js';
import { tempProject, writeCapability, writeManifest } from '../../helpers/capability.js';

/**
 * A repository's own files (capsule.json, .capsule/profiles) are untrusted: they may make sandboxed calls
 * run unasked, never host code. Each case is judged by a marker file the host code would create.
 */

interface Hostile {
  root: string;
  marker: string;
}

/** A project whose capsule.json is `config`, with a shell capability `pwn` that creates the marker. */
async function hostile(config: Record<string, unknown>): Promise<Hostile> {
  const { root, capRoot } = await tempProject('capsule-persist-');
  const marker = path.join(root, 'PWNED');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1, ...config }, null, 2));
  await writeCapability(capRoot, 'pwn', {}, { 'run.sh': `#!/bin/sh\ntouch '${marker}'\necho '{}'\n` });
  await writeFile(
    path.join(capRoot, 'pwn', 'cases.json'),
    JSON.stringify({ schemaVersion: 1, cases: [{ name: 'runs', input: {}, expect: { json: {} } }] }),
  );
  return { root, marker };
}

/** Copy the shipped prebuilt Wasm example (a real WASI module) into a project, with its cases. */
async function addShoutWasm(root: string): Promise<void> {
  const from = path.join(REPO_ROOT, 'capabilities', 'shout-wasm');
  const to = path.join(root, 'capabilities', 'shout-wasm');
  await mkdir(to, { recursive: true });
  for (const f of ['capability.json', 'cases.json', 'shout.wasm'])
    await copyFile(path.join(from, f), path.join(to, f));
}

/** A source, and which of the two host calls it would elevate today (run pwn / exec touch). */
const ELEVATING: Array<[string, Record<string, unknown>, { run: boolean; exec: boolean }]> = [
  ['mode bypass', { mode: 'bypass' }, { run: true, exec: true }],
  ['mode edit', { mode: 'edit' }, { run: false, exec: false }],
  ['allow run_capability', { permissions: { allow: ['run_capability'] } }, { run: true, exec: false }],
  ['allow run_capability(*)', { permissions: { allow: ['run_capability(*)'] } }, { run: true, exec: false }],
  [
    'allow run_capability(pwn)',
    { permissions: { allow: ['run_capability(pwn)'] } },
    { run: true, exec: false },
  ],
  ['allow run_command', { permissions: { allow: ['run_command'] } }, { run: false, exec: true }],
  ['allow run_command(*)', { permissions: { allow: ['run_command(*)'] } }, { run: false, exec: true }],
  [
    'allow run_command(touch *)',
    { permissions: { allow: ['run_command(touch *)'] } },
    { run: false, exec: true },
  ],
  [
    'bypass and allow everything',
    { mode: 'bypass', permissions: { allow: ['run_capability', 'run_command'] } },
    { run: true, exec: true },
  ],
];

const IGNORED = /capsule\.json.*(ignored|does not apply)|(ignored|does not apply).*capsule\.json/;

describe('a repository file never makes unsandboxed calls run unasked', () => {
  for (const [what, config, elevates] of ELEVATING) {
    it(`${what}: run --no-prompt of a shell capability exits 77, nothing runs, a warning says why`, async () => {
      const p = await hostile(config);
      const r = await cli(['run', 'pwn', '--no-prompt'], { cwd: p.root });
      expect(existsSync(p.marker)).toBe(false);
      expect(r.code).toBe(77);
      if (elevates.run) expect(r.stderr).toMatch(IGNORED);
    });

    it(`${what}: exec --no-prompt of a host command exits 77 and nothing runs`, async () => {
      const p = await hostile(config);
      const r = await cli(['exec', '--no-prompt', '--', `touch '${p.marker}'`], { cwd: p.root });
      expect(existsSync(p.marker)).toBe(false);
      expect(r.code).toBe(77);
      if (elevates.exec) expect(r.stderr).toMatch(IGNORED);
      const simple = await cli(['exec', '--no-prompt', '--', 'touch', p.marker], { cwd: p.root });
      expect(existsSync(p.marker)).toBe(false);
      expect(simple.code).toBe(77);
    });

    it(`${what}: ci runs no host code and fails the case as denied`, async () => {
      const p = await hostile(config);
      const r = await cli(['ci', '--json'], { cwd: p.root });
      expect(existsSync(p.marker)).toBe(false);
      // Every failure is a denial: the project's own files cannot grant host code (docs/ci.md).
      expect(r.code).toBe(77);
      const doc = JSON.parse(r.stdout) as {
        passed: number;
        outcomes: Array<{ capability: string; status: string }>;
      };
      expect(doc.outcomes.find((o) => o.capability === 'pwn')?.status).toBe('failed');
    });
  }

  it('a warning names the ignored mode at start-up of a --no-prompt run and of ci', async () => {
    const p = await hostile({ mode: 'bypass' });
    const run = await cli(['run', 'pwn', '--no-prompt'], { cwd: p.root });
    expect(run.stderr).toMatch(/mode "bypass".*capsule\.json/);
    const ci = await cli(['ci'], { cwd: p.root });
    expect(ci.stderr).toMatch(/mode "bypass".*capsule\.json/);
    expect(existsSync(p.marker)).toBe(false);
  });

  it('this process still decides: --grant and --mode bypass on the command line run it', async () => {
    const p = await hostile({ mode: 'bypass' });
    expect(
      (await cli(['run', 'pwn', '--no-prompt', '--grant', 'run_capability:pwn'], { cwd: p.root })).code,
    ).toBe(0);
    expect(existsSync(p.marker)).toBe(true);
    const q = await hostile({});
    expect((await cli(['run', 'pwn', '--no-prompt', '--mode', 'bypass'], { cwd: q.root })).code).toBe(0);
    expect(existsSync(q.marker)).toBe(true);
  });

  it('deny rules from the file still hold against a --grant', async () => {
    const p = await hostile({ permissions: { deny: ['run_capability(pwn)'] } });
    const r = await cli(['run', 'pwn', '--no-prompt', '--grant', 'run_capability:pwn'], { cwd: p.root });
    expect(r.code).toBe(77);
    expect(existsSync(p.marker)).toBe(false);
  });
});

describe('a repository file may make sandboxed calls run unasked', () => {
  for (const [what, config] of [
    ['mode bypass', { mode: 'bypass' }],
    ['allow run_capability', { permissions: { allow: ['run_capability'] } }],
    ['allow run_capability(shout-*)', { permissions: { allow: ['run_capability(shout-*)'] } }],
  ] as Array<[string, Record<string, unknown>]>) {
    it(`${what}: a wasm capability without rw grants runs with --no-prompt and in ci`, async () => {
      const p = await hostile(config);
      await addShoutWasm(p.root);
      const r = await cli(['run', 'shout-wasm', '--no-prompt', '--input', '{"a":"b"}'], { cwd: p.root });
      expect(r.stderr).not.toContain('Permission denied');
      expect(r.code).toBe(0);
      expect(r.stdout).toBe('{"A":"B"}');
      const ci = await cli(['ci', '--json'], { cwd: p.root });
      const doc = JSON.parse(ci.stdout) as { outcomes: Array<{ capability: string; status: string }> };
      expect(doc.outcomes.find((o) => o.capability === 'shout-wasm')?.status).toBe('passed');
      expect(doc.outcomes.find((o) => o.capability === 'pwn')?.status).toBe('failed');
      expect(existsSync(p.marker)).toBe(false);
    });
  }

  it('a wasm capability with a rw host grant is not sandboxed: the file cannot allow it', async () => {
    const p = await hostile({ mode: 'bypass', permissions: { allow: ['run_capability'] } });
    await addShoutWasm(p.root);
    await mkdir(path.join(p.root, 'out'));
    const manifest = path.join(p.root, 'capabilities', 'shout-wasm', 'capability.json');
    const m = JSON.parse(await readFile(manifest, 'utf8')) as Record<string, unknown>;
    await writeManifest(path.dirname(manifest), { ...m, grants: { fs: [{ path: 'out', mode: 'rw' }] } });
    const r = await cli(['run', 'shout-wasm', '--no-prompt'], { cwd: p.root });
    expect(r.code).toBe(77);
  });
});

describe('docker: hardened counts as sandboxed, a writable host mount does not', () => {
  async function dockerCapability(
    root: string,
    name: string,
    extra: Record<string, unknown>,
    script: string,
  ) {
    await writeCapability(
      path.join(root, 'capabilities'),
      name,
      {
        environment: 'docker',
        entry: 'run.sh',
        interpreter: 'sh',
        docker: { image: 'capsule/busybox:1' },
        limits: { timeoutMs: 20000, memoryMb: 64, outputBytes: 65536, pids: 32 },
        ...extra,
      },
      { 'run.sh': script },
    );
  }

  it('mode bypass in capsule.json runs a hardened container with --no-prompt', async () => {
    const p = await hostile({ mode: 'bypass' });
    await dockerCapability(p.root, 'boxed', {}, 'echo "{\\"uid\\":$(id -u)}"\n');
    const r = await cli(['run', 'boxed', '--no-prompt'], { cwd: p.root });
    expect(r.stderr).not.toContain('Permission denied');
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe('{"uid":65534}');
  }, 120_000);

  it('mode bypass in capsule.json cannot run a container with a writable host mount', async () => {
    const p = await hostile({ mode: 'bypass', permissions: { allow: ['run_capability(*)'] } });
    const out = path.join(p.root, 'out');
    await mkdir(out);
    await chmod(out, 0o777);
    await dockerCapability(
      p.root,
      'mounted',
      { grants: { fs: [{ path: 'out', mode: 'rw' }] } },
      'touch /project/out/PWNED\necho {}\n',
    );
    const r = await cli(['run', 'mounted', '--no-prompt'], { cwd: p.root });
    expect(existsSync(path.join(out, 'PWNED'))).toBe(false);
    expect(r.code).toBe(77);
    // The same call with this process's grant does write there (the attack above was real).
    const granted = await cli(['run', 'mounted', '--no-prompt', '--grant', 'run_capability:mounted'], {
      cwd: p.root,
    });
    expect(granted.code, granted.stderr).toBe(0);
    expect(existsSync(path.join(out, 'PWNED'))).toBe(true);
  }, 120_000);
});

describe('ci --env: a sandboxed capability run as a host process is judged as one', () => {
  it('mode bypass in capsule.json lets the wasm case run but not its shell (node on the host) variant', async () => {
    const p = await hostile({ mode: 'bypass' });
    const to = path.join(p.root, 'capabilities', 'hello');
    await mkdir(to, { recursive: true });
    const from = path.join(REPO_ROOT, 'capabilities', 'hello');
    for (const f of ['capability.json', 'cases.json', 'hello.wasm'])
      await copyFile(path.join(from, f), path.join(to, f));
    // The same source, which on the host (node) also leaves a marker; inside QuickJS there is no process.
    const marker = path.join(p.root, 'NODE-RAN');
    const source = await readFile(path.join(from, 'hello.js'), 'utf8');
    await writeFile(
      path.join(to, 'hello.js'),
      `${source}\nif (typeof process !== 'undefined') process.getBuiltinModule('node:fs').writeFileSync(${JSON.stringify(marker)}, 'x');\n`,
    );
    const r = await cli(['ci', '--env', 'shell,wasm', '--json'], { cwd: p.root });
    const doc = JSON.parse(r.stdout) as {
      outcomes: Array<{ capability: string; environment: string; status: string }>;
    };
    const hello = doc.outcomes.filter((o) => o.capability === 'hello');
    expect(hello.filter((o) => o.environment === 'wasm').every((o) => o.status === 'passed')).toBe(true);
    expect(hello.filter((o) => o.environment === 'shell').map((o) => o.status)).toEqual(
      expect.arrayContaining(['failed']),
    );
    expect(hello.filter((o) => o.environment === 'shell').every((o) => o.status === 'failed')).toBe(true);
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(p.marker)).toBe(false);
  }, 120_000);
});
