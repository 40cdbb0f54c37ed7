import path from 'node:path';
import { execa } from 'execa';
import { BUILT_CLI } from './cli.js';

/** A project and the environment Claude Code would run the hook and its Bash calls in. */
export interface HookWorld {
  project: string;
  env: NodeJS.ProcessEnv;
}

/** The hook's environment for a project under `home`: its own HOME, state and cache, nothing inherited. */
export function claudeHookEnv(home: string, project: string): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    HOME: path.join(home, 'home'),
    XDG_STATE_HOME: path.join(home, 'state'),
    XDG_CACHE_HOME: path.join(home, 'cache'),
    CLAUDE_PROJECT_DIR: project,
  };
}

/** A PreToolUse envelope as Claude Code sends it (the transcript beside the project). */
export function preToolUse(project: string, tool: string, input: Record<string, unknown>): string {
  return JSON.stringify({
    session_id: 'test-session',
    transcript_path: path.join(path.dirname(project), 'transcript.jsonl'),
    cwd: project,
    permission_mode: 'default',
    hook_event_name: 'PreToolUse',
    tool_name: tool,
    tool_input: input,
    tool_use_id: 'toolu_01',
  });
}

/** The built CLI's `hook claude` with one envelope on stdin, as Claude Code runs it. */
export function runHook(w: HookWorld, input: string, flags: string[] = []) {
  return execa(process.execPath, [BUILT_CLI, 'hook', 'claude', ...flags], {
    cwd: w.project,
    env: w.env,
    extendEnv: false,
    input,
    reject: false,
  });
}

/** A command run with bash in the project, as Claude Code's Bash tool runs what the hook let through. */
export function bashIn(w: HookWorld, command: string) {
  return execa('bash', ['-c', command], {
    cwd: w.project,
    env: w.env,
    extendEnv: false,
    reject: false,
    timeout: 30_000,
  });
}
