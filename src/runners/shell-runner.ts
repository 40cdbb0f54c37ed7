import { access, constants } from 'node:fs/promises';
import { CapsuleError } from '../errors.js';
import type { Capability } from '../manifest/types.js';
import { CappedOutput } from './capped-output.js';
import { emptyResult, type RunRequest, type RunResult, type Runner } from './types.js';

/** PATH given to shell capabilities: a fixed system path, never the caller's (which may hold user dirs). */
export const SHELL_PATH = '/usr/local/bin:/usr/bin:/bin';
const KILL_GRACE_MS = 200;

export interface ShellRunnerOptions {
  /** The host environment that granted variables are copied from (default: process.env). */
  hostEnv?: NodeJS.ProcessEnv;
}

/** The scrubbed environment: a fixed PATH plus exactly the granted variables that exist on the host. */
export function scrubbedEnv(capability: Capability, hostEnv: NodeJS.ProcessEnv): Record<string, string> {
  const env: Record<string, string> = { PATH: SHELL_PATH };
  for (const name of capability.manifest.grants.env) {
    const value = hostEnv[name];
    if (value !== undefined) env[name] = value;
  }
  return env;
}

/** argv for a capability: `interpreter entry args…`, or `entry args…` when it is executable itself. */
export function commandLine(capability: Capability): { file: string; args: string[] } {
  const { interpreter, args } = capability.manifest;
  if (interpreter !== undefined) return { file: interpreter, args: [capability.entryPath, ...args] };
  return { file: capability.entryPath, args: [...args] };
}

function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    // Negative pid: the whole process group, so grandchildren die with the child.
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

/**
 * Host processes. NOT a sandbox: it scrubs the environment, confines the cwd, caps output and time,
 * and kills the whole process group — which is why its grants never reach the project allowlist.
 */
export class ShellRunner implements Runner {
  readonly environment = 'shell' as const;
  private readonly hostEnv: NodeJS.ProcessEnv;

  constructor(options: ShellRunnerOptions = {}) {
    this.hostEnv = options.hostEnv ?? process.env;
  }

  async available(): Promise<{ ok: true }> {
    return { ok: true };
  }

  async close(): Promise<void> {}

  async run(request: RunRequest): Promise<RunResult> {
    const { capability, input, signal } = request;
    const { limits } = capability.manifest;
    const { file, args } = commandLine(capability);
    if (capability.manifest.interpreter === undefined) {
      try {
        await access(capability.entryPath, constants.X_OK);
      } catch {
        throw new CapsuleError('RUNNER_FAILED', `${capability.entryPath} is not executable.`, {
          file: capability.manifestPath,
          field: 'entry',
          hint: 'Set "interpreter" (e.g. "sh") in capability.json, or make the entry executable (chmod +x).',
        });
      }
    }

    // Loaded on the first shell run: a process that runs none never pays for execa.
    const { execa } = await import('execa');
    const result = emptyResult('shell');
    const started = performance.now();
    if (signal?.aborted) {
      result.canceled = true;
      return result;
    }

    const child = execa(file, args, {
      cwd: capability.dir,
      env: scrubbedEnv(capability, this.hostEnv),
      extendEnv: false,
      detached: true, // own process group, so the whole tree can be killed
      stdin: 'pipe',
      stdout: 'pipe',
      stderr: 'pipe',
      buffer: false,
      reject: false,
      stripFinalNewline: false,
      windowsHide: true,
    });

    let escalation: NodeJS.Timeout | undefined;
    const stop = (): void => {
      killGroup(child.pid, 'SIGTERM');
      escalation ??= setTimeout(() => killGroup(child.pid, 'SIGKILL'), KILL_GRACE_MS);
    };
    const onOverflow = (): void => {
      result.truncated = true;
      killGroup(child.pid, 'SIGKILL');
    };
    const stdout = new CappedOutput(limits.outputBytes, onOverflow);
    const stderr = new CappedOutput(limits.outputBytes, onOverflow);
    child.stdout?.on('data', (c: Buffer) => stdout.push(c));
    child.stderr?.on('data', (c: Buffer) => stderr.push(c));
    // A capability that never reads stdin must not make us fail with EPIPE.
    child.stdin?.on('error', () => {});
    child.stdin?.end(input);

    const timer = setTimeout(() => {
      result.timedOut = true;
      stop();
    }, limits.timeoutMs);
    const onAbort = (): void => {
      result.canceled = true;
      stop();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    // When the child exits, anything it left behind in its group dies too (and releases the pipes).
    child.on('exit', () => killGroup(child.pid, 'SIGKILL'));

    const done = await child;
    clearTimeout(timer);
    if (escalation) clearTimeout(escalation);
    signal?.removeEventListener('abort', onAbort);

    if (
      done.failed &&
      done.exitCode === undefined &&
      done.signal === undefined &&
      !result.canceled &&
      !result.timedOut
    ) {
      // Could not start at all (ENOENT for the interpreter, EACCES …): not a run result.
      throw new CapsuleError(
        'RUNNER_FAILED',
        `Could not start ${file}: ${done.shortMessage ?? done.message}`,
        {
          file: capability.manifestPath,
          field: capability.manifest.interpreter !== undefined ? 'interpreter' : 'entry',
        },
      );
    }
    result.exitCode = done.exitCode ?? null;
    result.signal = done.signal ?? null;
    result.stdout = stdout.text();
    result.stderr = stderr.text();
    result.durationMs = performance.now() - started;
    return result;
  }
}
