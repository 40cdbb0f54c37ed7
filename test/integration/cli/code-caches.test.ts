import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempProject } from '../../helpers/capability.js';
import { BUILT_CLI, REPO_ROOT } from '../../helpers/cli.js';

const HOOK = path.join(REPO_ROOT, 'test', 'helpers', 'code-cache-log.mjs');

// A code cache V8 rejects (made under other V8 flags) costs more than no cache at all. The commands run
// under two flag sets (src/cli/main.ts): each must find caches made under its own, for every chunk it loads.
describe('the built CLI compiles its chunks from code caches V8 accepts', () => {
  let project: string;
  let scratch: string;
  let env: NodeJS.ProcessEnv;
  let runs = 0;

  async function caches(args: string[], input = ''): Promise<{ code: number; lines: string[] }> {
    const log = path.join(scratch, `caches-${runs++}.txt`);
    const r = await execa('node', ['--import', HOOK, BUILT_CLI, ...args], {
      cwd: project,
      env: { ...env, CAPSULE_CODE_CACHE_LOG: log },
      reject: false,
      input,
      timeout: 60_000,
    });
    const lines = existsSync(log) ? (await readFile(log, 'utf8')).split('\n').filter(Boolean) : [];
    return { code: r.exitCode ?? -1, lines };
  }

  beforeAll(async () => {
    const { root, capRoot } = await tempProject('capsule-code-caches-');
    project = root;
    scratch = await mkdtemp(path.join(tmpdir(), 'capsule-code-caches-log-'));
    env = {
      ...process.env,
      XDG_CACHE_HOME: path.join(scratch, 'cache'),
      XDG_STATE_HOME: path.join(scratch, 'state'),
    };
    await writeFile(path.join(root, 'capsule.json'), '{}\n');
    const wasmDir = path.join(capRoot, 'hello');
    await mkdir(wasmDir, { recursive: true });
    for (const f of ['capability.json', 'hello.wasm', 'hello.js'])
      await copyFile(path.join(REPO_ROOT, 'capabilities', 'hello', f), path.join(wasmDir, f));
  });

  afterAll(async () => {
    await rm(project, { recursive: true, force: true });
    await rm(scratch, { recursive: true, force: true });
  });

  const envelope = (tool: string, input: Record<string, unknown>): string =>
    JSON.stringify({ hook_event_name: 'PreToolUse', tool_name: tool, tool_input: input, cwd: project });

  const commands: Array<[string, string[], () => string]> = [
    ['list', ['list'], () => ''],
    ['run hello', ['run', 'hello', '--grant', 'run_capability:hello', '--input', '{"name":"c"}'], () => ''],
    ['key', ['key', '--', 'git status'], () => ''],
    ['hook claude (Bash)', ['hook', 'claude'], () => envelope('Bash', { command: 'git status' })],
  ];

  for (const [name, args, input] of commands) {
    it(`${name}: every chunk's cache is accepted`, async () => {
      const r = await caches(args, input());
      expect(r.code).toBe(0);
      // The control: the chunks did load through their caches (the log saw them).
      expect(r.lines.length).toBeGreaterThan(5);
      expect(r.lines.filter((l) => l.endsWith(' rejected'))).toEqual([]);
    });
  }
});
