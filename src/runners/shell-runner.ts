import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { access, constants, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';
import type { Capability } from '../manifest/types.js';
import { claudeConfinedPath, protectedPaths, type HostProtection } from '../project/protected-state.js';
import type { HostConfinement } from './host/confinement.js';
import { HostProcesses } from './host/host-processes.js';
import { parseTrace, TRACER, tracerArgs } from './tracer.js';
import { finishedRun, type RunObservations, type RunRequest, type RunResult, type Runner } from './types.js';
import { redeemPermit, type RunnerPermit } from './permit.js';

/** PATH given to shell capabilities: a fixed system path, never the caller's (which may hold user dirs). */
export const SHELL_PATH = '/usr/local/bin:/usr/bin:/bin';

export interface ShellRunnerOptions {
  /**
   * The host environment that granted variables are copied from. Default: none (a runner built
   * without it grants no host variable; openRuntime passes capsule's own).
   */
  hostEnv?: NodeJS.ProcessEnv;
  /** The project whose state (capsule.json, .capsule/) the capability must not change. */
  projectRoot?: string | undefined;
  /** What the capability may not change or see (default: the project's protected paths read-only). */
  protection?: HostProtection | undefined;
  /** How host processes are started (default: a new one, probing this machine on first use). */
  hostProcesses?: HostProcesses | undefined;
  /** The tracer program of learning runs (default: Debian's strace, found on PATH). */
  tracer?: string | undefined;
}

/**
 * The scrubbed environment: a fixed PATH, the project's folder (as in docker, where it is /project, so one
 * script reads its granted files in both), plus exactly the granted variables that exist on the host.
 */
export function scrubbedEnv(
  capability: Capability,
  hostEnv: NodeJS.ProcessEnv,
  projectRoot?: string,
): Record<string, string> {
  const env: Record<string, string> = { PATH: SHELL_PATH };
  if (projectRoot !== undefined) env.CAPSULE_PROJECT_DIR = projectRoot;
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

/**
 * Host processes. NOT a sandbox: it scrubs the environment, confines the cwd, caps output and time,
 * and — where the machine allows it — runs the capability in its own pid namespace with capsule's state
 * read-only and memory/pids limits (see host/host-processes.ts); that is why its grants never reach the
 * project allowlist.
 */
export class ShellRunner implements Runner {
  readonly environment = 'shell' as const;
  private readonly hostEnv: NodeJS.ProcessEnv;
  private readonly protection: HostProtection;
  private readonly processes: HostProcesses;
  private readonly projectRoot: string | undefined;
  private readonly tracer: string;

  constructor(options: ShellRunnerOptions = {}) {
    this.tracer = options.tracer ?? TRACER;
    this.hostEnv = options.hostEnv ?? {};
    this.projectRoot = options.projectRoot;
    const root = options.projectRoot;
    const claude = root !== undefined ? [claudeConfinedPath(root).path] : [];
    this.protection = options.protection ?? {
      readOnly: root !== undefined ? [...protectedPaths(root).all, ...claude] : [],
      hidden: [],
      madeFolders: claude,
    };
    this.processes = options.hostProcesses ?? new HostProcesses(undefined, { prestart: true });
  }

  async available(): Promise<{ ok: true }> {
    return { ok: true };
  }

  /** What confinement shell capabilities get on this machine (measured once). */
  confinement(): HostConfinement {
    return this.processes.confinement();
  }

  async close(): Promise<void> {
    await this.processes.close();
  }

  async run(request: RunRequest, permit: RunnerPermit): Promise<RunResult> {
    redeemPermit(permit, request.capability);
    const { capability, input, signal } = request;
    const { limits } = capability.manifest;
    const command = commandLine(capability);
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

    // A learning run starts the tracer as the run's first process, inside the same confinement: it sees
    // what the capability does there and widens nothing. Its output goes to a private folder of capsule's.
    const traceDir = request.learn ? mkdtempSync(path.join(tmpdir(), 'capsule-trace-')) : undefined;
    const { file, args } =
      traceDir === undefined
        ? command
        : {
            file: this.tracer,
            args: tracerArgs(path.join(traceDir, 'trace'), [command.file, ...command.args]),
          };
    const done = await this.processes
      .run({
        file,
        args,
        cwd: capability.dir,
        env: scrubbedEnv(capability, this.hostEnv, this.projectRoot),
        input,
        output: 'capture',
        outputBytes: limits.outputBytes,
        timeoutMs: limits.timeoutMs,
        signal,
        protection: this.protection,
        memoryBytes: limits.memoryMb * 1024 * 1024,
        // The tracer is one more process of the run.
        pids: traceDir === undefined ? limits.pids : limits.pids + 1,
      })
      .catch(async (err: unknown) => {
        if (traceDir !== undefined) await rm(traceDir, { recursive: true, force: true });
        throw err;
      });
    const observed = traceDir === undefined ? undefined : readTrace(traceDir, this.tracer);
    if (done.startError !== undefined) {
      // Could not start at all (ENOENT for the interpreter, EACCES …): not a run result.
      throw new CapsuleError('RUNNER_FAILED', `Could not start ${file}: ${done.startError}`, {
        file: capability.manifestPath,
        field: capability.manifest.interpreter !== undefined ? 'interpreter' : 'entry',
      });
    }
    return { environment: 'shell', ...finishedRun(done), ...(observed === undefined ? {} : { observed }) };
  }
}

/**
 * The tracer's files of one run, parsed and removed. Synchronously: a few small files of capsule's own, read
 * before the next prestarted init (started as this run ends) can hold the event loop.
 */
function readTrace(dir: string, tracer: string): RunObservations {
  try {
    const names = readdirSync(dir)
      .filter((n) => n.startsWith('trace'))
      .sort();
    const texts = names.map((n) => readFileSync(path.join(dir, n), 'utf8'));
    // No record at all: the tracer never started (not installed, or refused where this run is confined).
    // An empty proposal then means "not seen", never "needs nothing": it says so first.
    const blind =
      names.length === 0
        ? [
            `nothing: the tracer (${tracer}) left no record, so it did not run here (is it installed, and may it trace inside the confinement?); nothing this run did was observed`,
          ]
        : [];
    return {
      observations: parseTrace(texts),
      unobserved: [
        ...blind,
        'environment variables read (a tracer sees system calls; a variable is read inside the process)',
        'host names (a tracer sees the addresses connected to, not the names looked up)',
        'HTTP methods (a tracer sees connections, not requests)',
      ],
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
