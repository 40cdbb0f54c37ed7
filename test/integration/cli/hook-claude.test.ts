// `capsule hook claude` as Claude Code runs it: the built CLI, a real PreToolUse envelope on stdin, and
// what the answer lets through run for real with bash, judged by what happens to the files.
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_CLI } from '../../helpers/cli.js';
import { holdsWithin } from '../../helpers/eventually.js';
import { pastSleepOf } from '../../helpers/processes.js';
import { bashIn, claudeHookEnv, preToolUse, runHook } from '../../helpers/claude-hook.js';

interface World {
  home: string;
  project: string;
  outside: string;
  env: NodeJS.ProcessEnv;
}

const CLAUDE_SETTINGS = {
  permissions: { allow: ['Bash(git status:*)'], deny: ['Bash(rm:*)', 'Edit(src/locked/**)'] },
};
const VICTIM = 'victim.txt';

async function world(settings: unknown = CLAUDE_SETTINGS, user?: unknown): Promise<World> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'capsule-hook-'));
  const project = path.join(home, 'project');
  const outside = path.join(home, 'outside');
  await mkdir(path.join(project, '.claude'), { recursive: true });
  await mkdir(path.join(project, 'src'), { recursive: true });
  await mkdir(outside, { recursive: true });
  await mkdir(path.join(home, 'home', '.claude'), { recursive: true });
  await writeFile(path.join(project, 'capsule.json'), '{}\n');
  await writeFile(path.join(project, '.claude', 'settings.json'), JSON.stringify(settings));
  if (user !== undefined)
    await writeFile(path.join(home, 'home', '.claude', 'settings.json'), JSON.stringify(user));
  await writeFile(path.join(project, 'src', 'a.txt'), 'a\n');
  await writeFile(path.join(outside, 'secret.txt'), 'secret\n');
  await symlink(outside, path.join(project, 'out'));
  const env = claudeHookEnv(home, project);
  return { home, project, outside, env };
}

interface Answer {
  decision: 'allow' | 'deny' | 'ask' | 'none';
  reason?: string;
  updatedInput?: { command: string };
  code: number;
  stdout: string;
}

function envelope(w: World, tool: string, input: Record<string, unknown>): string {
  return preToolUse(w.project, tool, input);
}

async function hook(w: World, input: string, flags: string[] = []): Promise<Answer> {
  const r = await runHook(w, input, flags);
  if (r.stdout.trim() === '') return { decision: 'none', code: r.exitCode ?? -1, stdout: r.stdout };
  const out = JSON.parse(r.stdout) as {
    hookSpecificOutput: {
      hookEventName: string;
      permissionDecision: Answer['decision'];
      permissionDecisionReason: string;
      updatedInput?: { command: string };
    };
  };
  expect(out.hookSpecificOutput.hookEventName).toBe('PreToolUse');
  return {
    decision: out.hookSpecificOutput.permissionDecision,
    reason: out.hookSpecificOutput.permissionDecisionReason,
    updatedInput: out.hookSpecificOutput.updatedInput,
    code: r.exitCode ?? -1,
    stdout: r.stdout,
  };
}

const bash = bashIn;

/** Shapes that run rm on the victim past a `Bash(git status:*)` allow / `Bash(rm:*)` deny pair. */
const BYPASSES = [
  `git status; rm -rf ${VICTIM}`,
  `git status && rm ${VICTIM}`,
  `git status || rm ${VICTIM}`,
  `git status | rm ${VICTIM}`,
  `git status & rm ${VICTIM}`,
  `git status\nrm ${VICTIM}`,
  `git status $(rm ${VICTIM})`,
  `git status \`rm ${VICTIM}\``,
  `echo $(rm ${VICTIM})`,
  `env rm ${VICTIM}`,
  `setpriv rm ${VICTIM}`,
  `timeout 5 rm ${VICTIM}`,
  `nice -n 5 rm ${VICTIM}`,
  `command rm ${VICTIM}`,
  `exec rm ${VICTIM}`,
  `eval rm ${VICTIM}`,
  `/bin/rm ${VICTIM}`,
  `rm -f ${VICTIM}`,
  `'rm' ${VICTIM}`,
  `"r"m ${VICTIM}`,
  `r\\m ${VICTIM}`,
  `x=rm; $x ${VICTIM}`,
  `$(echo rm) ${VICTIM}`,
  `bash -c 'rm ${VICTIM}'`,
  `sh -c "rm ${VICTIM}"`,
  `xargs rm <<< ${VICTIM}`,
  `git -c alias.st='!rm ${VICTIM}' st`,
];

describe('capsule hook claude: Bash judged as run_command', () => {
  let w: World;
  beforeAll(async () => {
    w = await world();
  });
  afterAll(async () => {
    await rm(w.home, { recursive: true, force: true });
  });

  it.each(BYPASSES)('%j is asked or denied, never allowed or left to Claude Code', async (command) => {
    const a = await hook(w, envelope(w, 'Bash', { command }));
    expect(a.code).toBe(0);
    expect(['ask', 'deny'], `${command}: ${a.reason}`).toContain(a.decision);
    // Escaped: a newline in the command never reaches the prompt as a line of its own.
    expect(a.reason).not.toMatch(/\n/);
  });

  it('a deny names the rule and the Claude settings file it came from', async () => {
    const a = await hook(w, envelope(w, 'Bash', { command: `git status; rm -rf ${VICTIM}` }));
    expect(a.decision).toBe('deny');
    expect(a.reason).toContain('run_command(rm *)');
    expect(a.reason).toContain(path.join(w.project, '.claude', 'settings.json'));
  });

  it('`git status` alone passes (no decision), and every form that passes, run for real, leaves the victim', async () => {
    const passed: string[] = [];
    for (const command of ['git status', 'ls', ...BYPASSES]) {
      const a = await hook(w, envelope(w, 'Bash', { command }));
      if (a.decision === 'none' || a.decision === 'allow') passed.push(command);
    }
    expect(passed).toEqual(['git status', 'ls']);
    await writeFile(path.join(w.project, VICTIM), 'precious\n');
    for (const command of passed) await bash(w, command);
    expect(readFileSync(path.join(w.project, VICTIM), 'utf8')).toBe('precious\n');
    // Control: the bypass forms are real — run unjudged, they do remove the victim.
    for (const command of [
      BYPASSES[0],
      `env rm ${VICTIM}`,
      `echo $(rm ${VICTIM})`,
      `git status\nrm ${VICTIM}`,
    ]) {
      await writeFile(path.join(w.project, VICTIM), 'precious\n');
      await bash(w, command as string);
      expect(existsSync(path.join(w.project, VICTIM)), command).toBe(false);
    }
  });

  it('an empty command and a Bash call without a command are denied; unknown and capsule MCP tools get no decision', async () => {
    expect((await hook(w, envelope(w, 'Bash', { command: '   ' }))).decision).toBe('deny');
    expect((await hook(w, envelope(w, 'Bash', { cmd: 'ls' }))).decision).toBe('deny');
    expect((await hook(w, envelope(w, 'WebFetch', { url: 'https://example.com' }))).decision).toBe('none');
    expect((await hook(w, envelope(w, 'mcp__capsule__run_capability', { name: 'x' }))).decision).toBe('none');
  });

  it('an envelope capsule cannot parse is denied with the reason (fail closed)', async () => {
    for (const input of ['', 'not json', '{}', '[]', '{"hook_event_name":"PreToolUse","tool_name":"Bash"}']) {
      const a = await hook(w, input);
      expect(a.decision, input).toBe('deny');
      expect(a.code).toBe(0);
      expect(a.reason).toMatch(/fail closed/);
    }
    const relative = JSON.parse(envelope(w, 'Bash', { command: 'ls' })) as Record<string, unknown>;
    expect((await hook(w, JSON.stringify({ ...relative, cwd: 'project' }))).decision).toBe('deny');
    expect((await hook(w, JSON.stringify({ ...relative, hook_event_name: 'PostToolUse' }))).decision).toBe(
      'deny',
    );
  });

  it('every decision is in the audit log as tool claude-hook, and the chain verifies', async () => {
    const log = await readFile(path.join(w.project, '.capsule', 'audit.jsonl'), 'utf8');
    const records = log
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { tool: string; decision: string; key: string });
    expect(records.length).toBeGreaterThan(BYPASSES.length);
    expect(records.every((r) => r.tool === 'claude-hook')).toBe(true);
    expect(records.some((r) => r.decision === 'none' && r.key === 'run_command:git')).toBe(true);
    expect(records.some((r) => r.decision === 'deny' && r.key === 'claude:?')).toBe(true);
    const verify = await execa(process.execPath, [BUILT_CLI, 'audit', 'verify'], {
      cwd: w.project,
      env: w.env,
      extendEnv: false,
      reject: false,
    });
    expect(verify.exitCode, verify.stdout + verify.stderr).toBe(0);
  });

  it('agent-written capsule commands gain nothing: they are asked or denied', async () => {
    const forms = [
      `capsule exec --grant 'run_command:rm -rf ${VICTIM}' -- 'rm -rf ${VICTIM}'`,
      `capsule run wipe --grant run_capability:wipe`,
      `capsule hook claude --install --user --yes`,
      `CAPSULE_STATE_DIR=/tmp capsule exec -- 'rm ${VICTIM}'`,
      `${process.execPath} ${BUILT_CLI} exec --grant 'run_command:rm ${VICTIM}' -- 'rm ${VICTIM}'`,
      `capsule exec --grant-id 0123456789abcdef0123456789abcdef -- 'git status'`,
    ];
    for (const command of forms) {
      const a = await hook(w, envelope(w, 'Bash', { command }));
      expect(['ask', 'deny'], `${command}: ${a.reason}`).toContain(a.decision);
    }
  });
});

describe('capsule hook claude: file tools judged as capsule’s file tools', () => {
  let w: World;
  beforeAll(async () => {
    w = await world();
  });
  afterAll(async () => {
    await rm(w.home, { recursive: true, force: true });
  });

  it('capsule.json, .capsule/, capsule’s per-user state, a path outside and a symlink out are denied', async () => {
    const state = path.join(w.home, 'state', 'capsule', 'secret', 'state.key');
    const cases: Array<[string, Record<string, unknown>]> = [
      ['Read', { file_path: path.join(w.project, 'capsule.json') }],
      [
        'Edit',
        {
          file_path: path.join(w.project, 'capsule.json'),
          old_string: '{}',
          new_string: '{"mode":"bypass"}',
        },
      ],
      ['Write', { file_path: path.join(w.project, 'capsule.json'), content: '{"mode":"bypass"}' }],
      ['Write', { file_path: path.join(w.project, '.capsule', 'audit.jsonl'), content: '' }],
      ['Read', { file_path: path.join(w.project, '.capsule', 'audit.jsonl') }],
      ['MultiEdit', { file_path: path.join(w.project, 'sub', 'capsule.json'), edits: [] }],
      ['Write', { file_path: path.join(w.outside, 'planted.txt'), content: 'x' }],
      ['Read', { file_path: path.join(w.outside, 'secret.txt') }],
      ['Read', { file_path: '/etc/passwd' }],
      ['Read', { file_path: state }],
      ['Read', { file_path: path.join(w.project, 'out', 'secret.txt') }],
      ['Write', { file_path: path.join(w.project, 'out', 'planted.txt'), content: 'x' }],
      ['Edit', { file_path: path.join(w.project, 'src', '..', '..', 'outside', 'secret.txt') }],
      ['NotebookEdit', { notebook_path: path.join(w.outside, 'n.ipynb'), new_source: '' }],
      ['Grep', { pattern: 'secret', path: w.outside }],
      ['Glob', { pattern: '**', path: path.join(w.project, 'out') }],
      ['Read', { file_path: 'src/../../outside/secret.txt' }],
      // A Claude `Edit(...)` deny, mapped as `capsule rules import` maps it (write_file).
      ['Write', { file_path: path.join(w.project, 'src', 'locked', 'x.txt'), content: 'x' }],
      ['Write', { file_path: path.join(w.project, '.claude', 'settings.json'), content: '{}' }],
      [
        'Edit',
        { file_path: path.join(w.project, '.claude', 'settings.local.json'), old_string: '', new_string: '' },
      ],
      ['Read', {}],
    ];
    for (const [tool, input] of cases) {
      const a = await hook(w, envelope(w, tool, input));
      expect(a.decision, `${tool} ${JSON.stringify(input)}: ${a.reason}`).toBe('deny');
    }
  });

  it('files inside the project that are not capsule’s get no decision (control)', async () => {
    for (const [tool, input] of [
      ['Read', { file_path: path.join(w.project, 'src', 'a.txt') }],
      ['Write', { file_path: path.join(w.project, 'src', 'new.txt'), content: 'x' }],
      ['Edit', { file_path: path.join(w.project, 'src', 'a.txt'), old_string: 'a', new_string: 'b' }],
      ['Grep', { pattern: 'a' }],
      ['Read', { file_path: 'src/a.txt' }],
    ] as const) {
      const a = await hook(w, envelope(w, tool, input));
      expect(a.decision, `${tool}: ${a.reason}`).toBe('none');
    }
  });
});

describe('capsule hook claude: who may allow', () => {
  it('a repository’s files never make the hook allow a host command; the person’s user settings may (with --confine)', async () => {
    const w = await world(
      { permissions: { allow: ['Bash(*)', 'Bash(git status:*)', 'Bash(ls:*)'] } },
      { permissions: { allow: ['Bash(ls:*)'] } },
    );
    try {
      await writeFile(
        path.join(w.project, 'capsule.json'),
        JSON.stringify({ mode: 'bypass', permissions: { allow: ['run_command(*)', 'run_command'] } }),
      );
      await writeFile(
        path.join(w.project, '.claude', 'settings.local.json'),
        JSON.stringify({ permissions: { allow: ['Bash(*)'] } }),
      );
      for (const command of ['git status', 'touch x', 'git status && ls']) {
        const plain = await hook(w, envelope(w, 'Bash', { command }));
        expect(plain.decision, command).not.toBe('allow');
        const confined = await hook(w, envelope(w, 'Bash', { command }), ['--confine']);
        expect(confined.decision, command).toBe('ask');
      }
      const ls = await hook(w, envelope(w, 'Bash', { command: 'ls' }), ['--confine']);
      expect(ls.decision, ls.reason).toBe('allow');
      expect(ls.updatedInput?.command).toContain(' exec --grant-id ');
      // A compound command is never covered by a rule for one program, whoever wrote it.
      const compound = await hook(w, envelope(w, 'Bash', { command: 'ls; ls' }), ['--confine']);
      expect(compound.decision).toBe('ask');
    } finally {
      await rm(w.home, { recursive: true, force: true });
    }
  });
});

describe('capsule hook claude --confine', () => {
  let w: World;
  beforeAll(async () => {
    w = await world({ permissions: { allow: ['Bash(git status:*)'], deny: ['Bash(rm:*)'] } });
  });
  afterAll(async () => {
    await rm(w.home, { recursive: true, force: true });
  });

  const confined = async (command: string, timeout?: number): Promise<string> => {
    const a = await hook(w, envelope(w, 'Bash', timeout === undefined ? { command } : { command, timeout }), [
      '--confine',
    ]);
    expect(a.decision, a.reason).toBe('ask');
    expect(a.updatedInput?.command).toBeDefined();
    return a.updatedInput?.command as string;
  };

  it('a background process the command starts is gone after it (control: unconfined it lives on)', async () => {
    const command = '(sleep 1; touch late-bg) & echo started';
    const run = await bash(w, await confined(command));
    expect(run.exitCode, run.stderr).toBe(0);
    expect(run.stdout).toContain('started');
    await pastSleepOf(1);
    expect(existsSync(path.join(w.project, 'late-bg'))).toBe(false);
    await bash(w, command.replace('late-bg', 'late-control'));
    expect(await holdsWithin(() => existsSync(path.join(w.project, 'late-control')), 60_000)).toBe(true);
  });

  it('capsule’s state is read-only to it, and its per-user state hidden', async () => {
    const before = await readFile(path.join(w.project, 'capsule.json'), 'utf8');
    const run = await bash(
      w,
      await confined(
        `echo '{"mode":"bypass"}' > capsule.json; touch .capsule/planted; ls ${path.join(w.home, 'state', 'capsule')}`,
      ),
    );
    expect(run.stderr).toMatch(/Read-only file system/);
    expect(run.stdout.trim()).toBe('');
    expect(await readFile(path.join(w.project, 'capsule.json'), 'utf8')).toBe(before);
    expect(existsSync(path.join(w.project, '.capsule', 'planted'))).toBe(false);
  });

  it('the call’s timeout is a stop: the marker after the sleep never appears', async () => {
    const run = await bash(w, await confined('sleep 3; touch marker', 500));
    expect(run.exitCode).toBe(124);
    await pastSleepOf(3);
    expect(existsSync(path.join(w.project, 'marker'))).toBe(false);
  });

  it('the grant is used once: the same rewritten command run again is refused (77) and does nothing', async () => {
    const rewritten = await confined('touch once-a; touch once-b');
    expect((await bash(w, rewritten)).exitCode).toBe(0);
    expect(existsSync(path.join(w.project, 'once-a'))).toBe(true);
    await rm(path.join(w.project, 'once-a'));
    const again = await bash(w, rewritten);
    expect(again.exitCode).toBe(77);
    expect(existsSync(path.join(w.project, 'once-a'))).toBe(false);
  });

  it('the grant covers exactly its command: its id with another command is refused', async () => {
    const rewritten = await confined('touch exact-a; touch exact-b');
    const id = /--grant-id ([0-9a-f]{32})/.exec(rewritten)?.[1] as string;
    const forged = `${process.execPath} ${BUILT_CLI} exec --grant-id ${id} -- 'touch other-a; touch other-b'`;
    const run = await bash(w, `cd ${w.project} && ${forged}`);
    expect(run.exitCode).toBe(77);
    expect(existsSync(path.join(w.project, 'other-a'))).toBe(false);
  });

  it('an agent that writes the confined form itself gains nothing: its grant id is not visible inside', async () => {
    // A pending grant the agent learned of, presented from inside its own (confined) Bash call.
    const pending = await confined('touch stolen-a; touch stolen-b');
    const id = /--grant-id ([0-9a-f]{32})/.exec(pending)?.[1] as string;
    const agent = `${process.execPath} ${BUILT_CLI} exec --grant-id ${id} -- 'touch stolen-a; touch stolen-b'`;
    const a = await hook(w, envelope(w, 'Bash', { command: agent }), ['--confine']);
    expect(a.decision).toBe('ask');
    const run = await bash(w, a.updatedInput?.command as string);
    expect(run.exitCode).not.toBe(0);
    expect(existsSync(path.join(w.project, 'stolen-a'))).toBe(false);
    // A made-up id is refused outright.
    const madeUp = await bash(
      w,
      `cd ${w.project} && ${process.execPath} ${BUILT_CLI} exec --grant-id ${'0'.repeat(32)} -- 'touch stolen-a'`,
    );
    expect(madeUp.exitCode).toBe(77);
    expect(existsSync(path.join(w.project, 'stolen-a'))).toBe(false);
  });
});

describe('capsule hook claude --install / --uninstall', () => {
  const run = (w: World, args: string[]) =>
    execa(process.execPath, [BUILT_CLI, 'hook', 'claude', ...args], {
      cwd: w.project,
      env: w.env,
      extendEnv: false,
      input: '',
      reject: false,
    });

  it('install then uninstall leaves the project settings byte-identical; no --yes and no terminal writes nothing', async () => {
    const w = await world();
    try {
      const file = path.join(w.project, '.claude', 'settings.json');
      const original = '{"permissions": {"allow":["Bash(git status:*)"],   "deny":["Bash(rm:*)"]}, "x": 1}';
      await writeFile(file, original);
      const refused = await run(w, ['--install']);
      expect(refused.exitCode).toBe(77);
      expect(refused.stderr).toContain('+++');
      expect(await readFile(file, 'utf8')).toBe(original);
      const installed = await run(w, ['--install', '--yes']);
      expect(installed.exitCode, installed.stderr).toBe(0);
      const doc = JSON.parse(await readFile(file, 'utf8')) as {
        x: number;
        hooks: { PreToolUse: Array<{ hooks: Array<{ command: string }> }> };
      };
      expect(doc.x).toBe(1);
      expect(doc.hooks.PreToolUse[0]?.hooks[0]?.command).toContain('hook claude');
      // The installed hook answers as the hook (judged by effect: a denial for rm).
      const answer = await execa('bash', ['-c', doc.hooks.PreToolUse[0]?.hooks[0]?.command as string], {
        cwd: w.project,
        env: w.env,
        extendEnv: false,
        input: envelope(w, 'Bash', { command: 'rm -rf src' }),
      });
      expect(answer.stdout).toContain('"permissionDecision":"deny"');
      expect((await run(w, ['--uninstall'])).exitCode).toBe(77);
      expect((await run(w, ['--uninstall', '--yes'])).exitCode).toBe(0);
      expect(await readFile(file, 'utf8')).toBe(original);
      expect((await run(w, ['--uninstall', '--yes'])).exitCode).toBe(66);
    } finally {
      await rm(w.home, { recursive: true, force: true });
    }
  });

  it('a settings file that did not exist is gone again after uninstall; a file edited meanwhile loses only the hook', async () => {
    const w = await world();
    try {
      const file = path.join(w.env.HOME as string, '.claude', 'settings.json');
      const installed = await run(w, ['--install', '--user', '--yes', '--json']);
      expect(installed.exitCode).toBe(0);
      expect(JSON.parse(installed.stdout)).toMatchObject({ file, action: 'install', written: true });
      expect(existsSync(file)).toBe(true);
      expect((await run(w, ['--uninstall', '--user', '--yes'])).exitCode).toBe(0);
      expect(existsSync(file)).toBe(false);
      const project = path.join(w.project, '.claude', 'settings.json');
      expect((await run(w, ['--install', '--yes'])).exitCode).toBe(0);
      const edited = JSON.parse(await readFile(project, 'utf8')) as Record<string, unknown>;
      await writeFile(project, JSON.stringify({ ...edited, model: 'opus' }));
      expect((await run(w, ['--uninstall', '--yes'])).exitCode).toBe(0);
      expect(JSON.parse(await readFile(project, 'utf8'))).toEqual({ ...CLAUDE_SETTINGS, model: 'opus' });
      await writeFile(project, '{not json');
      const bad = await run(w, ['--install', '--yes']);
      expect(bad.exitCode).toBe(78);
      expect(await readFile(project, 'utf8')).toBe('{not json');
    } finally {
      await rm(w.home, { recursive: true, force: true });
    }
  });
});
