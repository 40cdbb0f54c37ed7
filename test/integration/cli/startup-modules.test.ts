import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { BUILT_CLI, REPO_ROOT } from '../../helpers/cli.js';

// What a command that does not use them must never load: each costs start-up time on every call.
const DOCKER = ['dockerode', 'tar-fs'];
const MCP = ['@modelcontextprotocol/sdk'];
const COMPONENTS = ['@bytecodealliance/jco-transpile', 'componentize-qjs'];
const BASH_PARSER = ['web-tree-sitter', 'tree-sitter-bash'];
// Loaded only when a tracer provider is registered (docs/telemetry.md).
const TELEMETRY = ['@opentelemetry/api'];
const HEAVY = [...DOCKER, ...MCP, ...COMPONENTS, ...BASH_PARSER, ...TELEMETRY];

const HOOK = path.join(REPO_ROOT, 'test', 'helpers', 'module-log.mjs');

/**
 * The npm packages among the loaded modules: the package right after the last node_modules/, or a
 * package bundled into the built CLI (each is its own file, dist/cli/vendor/<package>.js).
 */
function packagesOf(modules: readonly string[]): Set<string> {
  const out = new Set<string>();
  for (const m of modules) {
    const match =
      /node_modules\/((?:@[^/]+\/)?[^/]+)\/(?!.*node_modules\/)/.exec(m) ??
      /\/dist\/cli\/vendor\/((?:@[^/]+\/)?[^/]+)\.js$/.exec(m);
    if (match?.[1] !== undefined) out.add(match[1]);
  }
  return out;
}

describe('CLI start-up loads only what the command uses', () => {
  let project: string;
  let scratch: string;
  let env: NodeJS.ProcessEnv;
  let runs = 0;

  /** Run the built CLI with every loaded module recorded; returns its result and the module list. */
  async function loaded(
    args: string[],
    cwd = project,
    input = '',
  ): Promise<{ code: number; stdout: string; stderr: string; modules: string[]; packages: Set<string> }> {
    const log = path.join(scratch, `modules-${runs++}.txt`);
    const r = await execa('node', ['--import', HOOK, BUILT_CLI, ...args], {
      cwd,
      env: { ...env, CAPSULE_MODULE_LOG: log },
      reject: false,
      input,
      timeout: 60_000,
    });
    const modules = (await readFile(log, 'utf8')).split('\n').filter(Boolean);
    return {
      code: r.exitCode ?? -1,
      stdout: r.stdout,
      stderr: r.stderr,
      modules,
      packages: packagesOf(modules),
    };
  }

  beforeAll(async () => {
    const { root, capRoot } = await tempProject('capsule-startup-');
    project = root;
    scratch = await mkdtemp(path.join(tmpdir(), 'capsule-startup-log-'));
    // Per-test cache and state: no run reads a component another process transpiled.
    env = {
      ...process.env,
      XDG_CACHE_HOME: path.join(scratch, 'cache'),
      XDG_STATE_HOME: path.join(scratch, 'state'),
    };
    await writeFile(path.join(root, 'capsule.json'), '{}\n');
    // One capability of each environment, so listing them touches every runner's manifest handling.
    await writeCapability(capRoot, 'greet', {}, { 'run.sh': 'cat >/dev/null; echo hi\n' });
    const wasmDir = path.join(capRoot, 'hello');
    await mkdir(wasmDir, { recursive: true });
    for (const f of ['capability.json', 'hello.wasm', 'hello.js'])
      await copyFile(path.join(REPO_ROOT, 'capabilities', 'hello', f), path.join(wasmDir, f));
    await writeCapability(
      capRoot,
      'boxed',
      { environment: 'docker', docker: { image: 'capsule/busybox:1' } },
      { 'run.sh': 'echo boxed\n' },
    );
  });

  afterAll(async () => {
    await rm(project, { recursive: true, force: true });
    await rm(scratch, { recursive: true, force: true });
  });

  it('the module log sees ES modules, CommonJS requires and lazily imported packages', async () => {
    // The control: if the hook recorded nothing, every "not loaded" below would pass for nothing.
    const r = await loaded(['key', '--', 'git status']);
    expect(r.code).toBe(0);
    expect(r.modules.some((m) => m.endsWith('/dist/cli/program.js'))).toBe(true);
    expect(r.packages.has('commander')).toBe(true); // bundled into the built CLI (scripts/bundle-cli.mjs)
    expect(r.packages.has('web-tree-sitter')).toBe(true); // imported on first use by `key`
  });

  it('--version loads none of the heavy dependencies', async () => {
    const r = await loaded(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    expect(HEAVY.filter((p) => r.packages.has(p))).toEqual([]);
    // Nothing that starts processes or reads manifests is needed to print a version.
    expect(['execa', 'zod', 'ajv'].filter((p) => r.packages.has(p))).toEqual([]);
  });

  it('--version and -V alone answer before the program loads (no commander, no command module)', async () => {
    for (const flag of ['--version', '-V']) {
      const r = await loaded([flag]);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^\d+\.\d+\.\d+\n?$/);
      expect(r.packages.has('commander')).toBe(false);
      expect(r.modules.some((m) => m.endsWith('/dist/cli/program.js'))).toBe(false);
    }
    // With anything else on the line it is the program's own --version (same answer).
    const withJson = await loaded(['--version', '--json']);
    expect(withJson.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    expect(withJson.packages.has('commander')).toBe(true);
  });

  it('the Claude Code hook skips the program; a Bash call loads only the bash parser, a Write call not even that', async () => {
    const envelope = (tool: string, input: Record<string, unknown>): string =>
      JSON.stringify({ hook_event_name: 'PreToolUse', tool_name: tool, tool_input: input, cwd: project });
    const bash = await loaded(['hook', 'claude'], project, envelope('Bash', { command: 'rm -rf x; ls' }));
    expect(bash.code).toBe(0);
    expect(bash.stdout).toContain('"permissionDecision":"ask"'); // it did judge: a compound command
    expect(bash.packages.has('web-tree-sitter')).toBe(true);
    expect([...DOCKER, ...MCP, ...COMPONENTS, ...TELEMETRY].filter((p) => bash.packages.has(p))).toEqual([]);
    expect(bash.packages.has('commander')).toBe(false);
    expect(bash.modules.some((m) => m.endsWith('/dist/cli/program.js'))).toBe(false);
    const write = await loaded(
      ['hook', 'claude'],
      project,
      envelope('Write', { file_path: path.join(project, 'capsule.json'), content: '{}' }),
    );
    expect(write.stdout).toContain('"permissionDecision":"deny"');
    expect(HEAVY.filter((p) => write.packages.has(p))).toEqual([]);
  });

  it('list (a project with shell, wasm and docker capabilities) loads none of them', async () => {
    const r = await loaded(['list', '--json']);
    expect(r.code).toBe(0);
    const names = (JSON.parse(r.stdout) as { capabilities: { name: string }[] }).capabilities.map(
      (c) => c.name,
    );
    expect(names.sort()).toEqual(['boxed', 'greet', 'hello']);
    expect(HEAVY.filter((p) => r.packages.has(p))).toEqual([]);
    // Input schemas are checked with the meta-schema validator the build compiled: no Ajv compiler
    // (only the runtime helper that generated code requires).
    expect(
      r.modules.filter((m) => m.includes('/node_modules/ajv/') && !m.includes('/ajv/dist/runtime/')),
    ).toEqual([]);
  });

  it('--help and a command help load none of them, and still list every command and option', async () => {
    const top = await loaded(['--help']);
    expect(top.code).toBe(0);
    for (const command of [
      'list',
      'show',
      'validate',
      'run',
      'mcp',
      'ci',
      'compare',
      'images',
      'exec',
      'key',
    ])
      expect(top.stdout).toMatch(new RegExp(`^\\s+${command}\\b`, 'm'));
    for (const command of ['explain', 'grants', 'reload', 'audit', 'wasm', 'new'])
      expect(top.stdout).toMatch(new RegExp(`^\\s+${command}\\b`, 'm'));
    expect(HEAVY.filter((p) => top.packages.has(p))).toEqual([]);
    const run = await loaded(['run', '--help']);
    expect(run.code).toBe(0);
    for (const option of ['--grant', '--no-prompt', '--mode', '--input', '--input-file', '--json'])
      expect(run.stdout).toContain(option);
    expect(HEAVY.filter((p) => run.packages.has(p))).toEqual([]);
    const scaffold = await loaded(['new', '--help']);
    expect(scaffold.code).toBe(0);
    for (const option of ['--env', '--from', '--json']) expect(scaffold.stdout).toContain(option);
    expect(HEAVY.filter((p) => scaffold.packages.has(p))).toEqual([]);
  });

  it.each([
    ['show', ['show', 'boxed', '--json']],
    ['validate', ['validate', '--json']],
    ['grants list', ['grants', 'list', '--json']],
    ['explain --capability', ['explain', '--capability', 'hello', '--json']],
    ['mcp --help', ['mcp', '--help']],
    ['images build --help', ['images', 'build', '--help']],
  ])('%s loads none of them', async (_label, args) => {
    const r = await loaded(args);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(HEAVY.filter((p) => r.packages.has(p))).toEqual([]);
  });

  it('key loads the bash parser but not docker, MCP or the component toolchain', async () => {
    const r = await loaded(['key', '--json', '--', 'git status && rm -rf /']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ tool: 'run_command', compound: true });
    expect([...DOCKER, ...MCP, ...COMPONENTS].filter((p) => r.packages.has(p))).toEqual([]);
  });

  it('running a shell capability loads neither docker, MCP, the component toolchain nor the bash parser', async () => {
    const r = await loaded(['run', 'greet', '--grant', 'run_capability:greet', '--no-prompt']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('hi');
    expect(HEAVY.filter((p) => r.packages.has(p))).toEqual([]);
  });

  it('the pattern engine (re2js) loads only for a schema that holds a pattern, from the bundle', async () => {
    for (const args of [
      ['--version'],
      ['--help'],
      ['list', '--json'],
      ['key', '--', 'git status'],
      ['run', 'greet', '--grant', 'run_capability:greet', '--no-prompt'],
    ]) {
      const r = await loaded(args);
      expect(r.code, args.join(' ')).toBe(0);
      expect(r.packages.has('re2js'), args.join(' ')).toBe(false);
    }
    const { root, capRoot } = await tempProject('capsule-startup-');
    await writeFile(path.join(root, 'capsule.json'), '{}\n');
    await writeCapability(
      capRoot,
      'picky',
      { inputSchema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } } },
      { 'run.sh': 'cat >/dev/null; echo ok\n' },
    );
    try {
      const r = await loaded(
        ['run', 'picky', '--grant', 'run_capability:picky', '--no-prompt', '--input', '{"s":"aaa"}'],
        root,
      );
      expect({ code: r.code, out: r.stdout }).toEqual({ code: 0, out: 'ok' });
      expect(r.modules.some((m) => m.endsWith('/dist/cli/vendor/re2js.js'))).toBe(true);
      expect(r.modules.filter((m) => m.includes('/node_modules/re2js/'))).toEqual([]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('running a component loads neither docker, MCP nor the bash parser', async () => {
    const r = await loaded(['run', 'hello', '--grant', 'run_capability:hello', '--input', '{"name":"x"}']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Hello, x!');
    expect([...DOCKER, ...MCP, ...BASH_PARSER].filter((p) => r.packages.has(p))).toEqual([]);
  });

  // The executor hints a runner once the capability resolves, before the gate decides: the hint may
  // start a Wasm worker (no capability code), but must not load what a denied call never uses.
  it('a docker run the gate denies loads no docker module (the runner hint loads nothing for it)', async () => {
    const r = await loaded(['run', 'boxed', '--no-prompt']);
    expect(r.code).toBe(77);
    expect(HEAVY.filter((p) => r.packages.has(p))).toEqual([]);
  });

  it('a component run the gate denies loads no component toolchain', async () => {
    const r = await loaded(['run', 'hello', '--no-prompt', '--input', '{"name":"x"}']);
    expect(r.code).toBe(77);
    expect(r.stdout).toBe('');
    expect(HEAVY.filter((p) => r.packages.has(p))).toEqual([]);
  });
});
