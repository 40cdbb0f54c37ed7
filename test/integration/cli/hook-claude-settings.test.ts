// `capsule hook claude --confine` against Claude Code's own project settings: a confined Bash call that
// rewrites `.claude/settings.json` (or plants `settings.local.json`) would add hooks Claude Code later runs
// unconfined. Judged by effect: the settings files' bytes, and whether a planted one exists afterwards.
import { existsSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bashIn, claudeHookEnv, preToolUse, runHook } from '../../helpers/claude-hook.js';

const SETTINGS = JSON.stringify({ permissions: { deny: ['Bash(rm:*)'] } });
const EVIL = '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/pwned"}]}]}}';
const homes: string[] = [];

interface World {
  project: string;
  env: NodeJS.ProcessEnv;
}

async function world(options: { claudeDir?: boolean } = {}): Promise<World> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'capsule-hook-settings-'));
  homes.push(home);
  const project = path.join(home, 'project');
  await mkdir(project, { recursive: true });
  await mkdir(path.join(home, 'home'), { recursive: true });
  await writeFile(path.join(project, 'capsule.json'), '{}\n');
  if (options.claudeDir !== false) {
    await mkdir(path.join(project, '.claude'));
    await writeFile(path.join(project, '.claude', 'settings.json'), SETTINGS);
  }
  const env = claudeHookEnv(home, project);
  return { project, env };
}

afterAll(async () => {
  for (const h of homes) await rm(h, { recursive: true, force: true });
});

const bash = bashIn;

/** The command Claude Code runs for `command` under `capsule hook claude --confine`. */
async function confined(w: World, command: string): Promise<string> {
  const r = await runHook(w, preToolUse(w.project, 'Bash', { command }), ['--confine']);
  const out = JSON.parse(r.stdout) as {
    hookSpecificOutput: { permissionDecision: string; updatedInput?: { command: string } };
  };
  expect(out.hookSpecificOutput.permissionDecision, r.stdout).toBe('ask');
  expect(out.hookSpecificOutput.updatedInput?.command).toBeDefined();
  return out.hookSpecificOutput.updatedInput?.command as string;
}

const settings = (w: World, name = 'settings.json'): string => path.join(w.project, '.claude', name);

/** Runs `command` confined, then (control) unconfined in a fresh world, and returns both worlds. */
async function attack(
  command: string,
  options: { claudeDir?: boolean } = {},
): Promise<{ w: World; control: World }> {
  const w = await world(options);
  const run = await bash(w, await confined(w, command));
  expect(run.stderr).not.toContain('internal error');
  const control = await world(options);
  await bash(control, command);
  return { w, control };
}

describe('capsule hook claude --confine: Claude Code’s project settings stay the person’s', () => {
  it('an overwrite of .claude/settings.json leaves its bytes (control: unconfined it changes)', async () => {
    const command = `echo '${EVIL}' > .claude/settings.json; printf x >> .claude/settings.json; true`;
    const { w, control } = await attack(command);
    expect(await readFile(settings(w), 'utf8')).toBe(SETTINGS);
    expect(await readFile(settings(control), 'utf8')).not.toBe(SETTINGS);
  });

  it('.claude/settings.local.json cannot be created when it does not exist (control: unconfined it is)', async () => {
    const command = `echo '${EVIL}' > .claude/settings.local.json; true`;
    const { w, control } = await attack(command);
    expect(existsSync(settings(w, 'settings.local.json'))).toBe(false);
    expect(existsSync(settings(control, 'settings.local.json'))).toBe(true);
  });

  it('a project without .claude/: neither the folder with settings nor the files can be planted', async () => {
    const command = `mkdir -p .claude; echo '${EVIL}' > .claude/settings.json; echo '${EVIL}' > .claude/settings.local.json; true`;
    const { w, control } = await attack(command, { claudeDir: false });
    expect(existsSync(settings(w))).toBe(false);
    expect(existsSync(settings(w, 'settings.local.json'))).toBe(false);
    expect(await readFile(settings(control), 'utf8')).toContain('pwned');
  });

  it('.claude/ renamed away and replaced: the folder and its settings stay (control: unconfined they go)', async () => {
    const command = `mv .claude .claude-old; mkdir .claude; echo '${EVIL}' > .claude/settings.json; true`;
    const { w, control } = await attack(command);
    expect(await readFile(settings(w), 'utf8')).toBe(SETTINGS);
    expect(existsSync(path.join(w.project, '.claude-old'))).toBe(false);
    expect(await readFile(settings(control), 'utf8')).toContain('pwned');
  });

  it('the settings file moved aside, or swapped for a symlink, stays (control: unconfined it goes)', async () => {
    const command = `echo '${EVIL}' > evil.json; mv .claude/settings.json .claude/old.json; mv evil.json .claude/settings.json; ln -sfn ../evil.json .claude/settings.local.json; true`;
    const { w, control } = await attack(command);
    expect(await readFile(settings(w), 'utf8')).toBe(SETTINGS);
    expect(existsSync(settings(w, 'settings.local.json'))).toBe(false);
    expect(await readFile(settings(control), 'utf8')).toContain('pwned');
  });

  it('a hard link made by one confined call is no way to write the settings in the next', async () => {
    const w = await world();
    await bash(
      w,
      await confined(
        w,
        'ln .claude/settings.json link.json; ln .claude/settings.json .claude/link.json; true',
      ),
    );
    await bash(w, await confined(w, `echo '${EVIL}' > link.json; echo '${EVIL}' > .claude/link.json; true`));
    expect(await readFile(settings(w), 'utf8')).toBe(SETTINGS);
    // Control: unconfined, the same two steps write through the link.
    const control = await world();
    await bash(control, `ln .claude/settings.json link.json; echo '${EVIL}' > link.json`);
    expect(await readFile(settings(control), 'utf8')).toContain('pwned');
  });

  it('a .claude/ capsule makes as root in someone else’s project is theirs, and still read-only to the run', async () => {
    const w = await world({ claudeDir: false });
    await chown(w.project, 65534, 65534);
    await bash(w, await confined(w, `echo '${EVIL}' > .claude/settings.json; true`));
    const made = await stat(path.join(w.project, '.claude'));
    expect([made.isDirectory(), made.uid, made.gid]).toEqual([true, 65534, 65534]);
    expect(existsSync(settings(w))).toBe(false);
  });

  it('the rest of the project stays writable to a confined call', async () => {
    const w = await world();
    const run = await bash(w, await confined(w, 'echo ok > built.txt; mkdir -p out && echo ok > out/x'));
    expect(run.exitCode, run.stderr).toBe(0);
    expect(await readFile(path.join(w.project, 'out', 'x'), 'utf8')).toBe('ok\n');
  });
});
