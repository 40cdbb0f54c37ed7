import { realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { CapsuleError } from '../../base/errors.js';
import type { DirGrant } from '../../runners/wasm/dir-grants.js';
import { positiveInt } from '../args.js';
import { EXIT } from '../exit-codes.js';
import { action, cancelOnSignals, json, write, type CliIO } from '../output.js';

interface WasmRunFlags {
  dir: string[];
  env: string[];
  timeoutMs: string;
  memoryMb: string;
  outputBytes: string;
  writeBytes: string;
  json?: boolean;
}

const collect = (value: string, previous: string[]): string[] => [...previous, value];

/** `HOST[::GUEST]` → a read-write directory grant (wasmtime's --dir semantics); GUEST defaults to HOST. */
async function parseDir(spec: string, cwd: string): Promise<DirGrant> {
  const sep = spec.indexOf('::');
  const host = sep >= 0 ? spec.slice(0, sep) : spec;
  const guest = sep >= 0 ? spec.slice(sep + 2) : spec;
  if (host === '' || guest === '') {
    throw new CapsuleError('USAGE', `--dir ${spec}: expected HOST or HOST::GUEST`, { field: '--dir' });
  }
  const resolved = path.resolve(cwd, host);
  const st = await stat(resolved).catch(() => undefined);
  if (st === undefined || !st.isDirectory()) {
    throw new CapsuleError('NOT_FOUND', `--dir ${spec}: ${resolved} is not a directory`, {
      field: '--dir',
      hint: 'Give an existing host directory.',
    });
  }
  return { hostPath: await realpath(resolved), guestPath: guest, mode: 'rw' };
}

function parseEnv(specs: readonly string[], hostEnv: NodeJS.ProcessEnv): Record<string, string> {
  const env: Record<string, string> = {};
  for (const spec of specs) {
    const eq = spec.indexOf('=');
    const key = eq >= 0 ? spec.slice(0, eq) : spec;
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
      throw new CapsuleError('USAGE', `--env ${spec}: "${key}" is not an environment variable name`, {
        field: '--env',
      });
    }
    // `--env KEY` passes the host's value through, like wasmtime.
    const value = eq >= 0 ? spec.slice(eq + 1) : hostEnv[key];
    if (value !== undefined) env[key] = value;
  }
  return env;
}

async function readStdin(io: CliIO): Promise<Uint8Array> {
  // A terminal cannot be read ahead of the run; the guest then sees an empty stdin.
  if (io.interactive) return new Uint8Array(0);
  const stdin = io.stdin();
  if (stdin.isTTY === true) return new Uint8Array(0);
  const chunks: Buffer[] = [];
  for await (const chunk of stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function writeBytes(stream: NodeJS.WritableStream, bytes: Uint8Array): Promise<void> {
  if (bytes.length === 0) return Promise.resolve();
  return new Promise((resolve) => stream.write(bytes, () => resolve()));
}

/** `capsule wasm run`: a WASI preview1 module (or a component) straight in the Wasm sandbox, like `wasmtime run`. */
export function registerWasmRun(program: Command, io: CliIO): void {
  const wasm = program
    .command('wasm')
    .description('Run WebAssembly directly in the Wasm sandbox (no manifest, no gate: the one ungated run).');
  wasm
    .command('run')
    .description(
      'Run a WASI preview1 module like `wasmtime run`: its stdout, stderr and exit code pass through unchanged\n' +
        '(proc_exit codes preserved; a trap exits 134, a timeout 124). Only --dir directories are visible\n' +
        '(the folders themselves, every path confined beneath them); the environment holds only --env variables; no network.',
    )
    .argument('<module>', 'the .wasm file')
    .argument('[args...]', 'arguments for the module, after -- (argv[0] is the module path)')
    .option(
      '--dir <HOST[::GUEST]>',
      'preopen a host directory (read-write), at GUEST (default: HOST as given)',
      collect,
      [],
    )
    .option(
      '--env <KEY[=VALUE]>',
      'set an environment variable (KEY alone passes the host value)',
      collect,
      [],
    )
    .option('--timeout-ms <ms>', 'wall-clock limit', '3600000')
    .option('--memory-mb <mb>', 'linear memory cap', '4096')
    .option('--output-bytes <n>', 'cap for stdout and for stderr, each', String(256 * 1024 * 1024))
    .option(
      '--write-bytes <n>',
      'bytes the module may write to its --dir folders in total; past it writes fail with ENOSPC',
      String(1024 * 1024 * 1024),
    )
    .option(
      '--json',
      'print one JSON document with the whole result (stdout/stderr as UTF-8 text) instead of passing output through',
    )
    .action(
      action(io, async (modulePath: string, args: string[], opts: WasmRunFlags) => {
        const file = path.resolve(io.cwd, modulePath);
        // The one ungated run: a module file as given, never a capability (src/runtime/ungated-module.ts).
        const [{ assertModuleFile, runUngatedModule }, { userCacheDir }] = await Promise.all([
          import('../../runtime/ungated-module.js'),
          import('../../base/cache-dir.js'),
        ]);
        await assertModuleFile(file);
        const dirs = await Promise.all(opts.dir.map((d) => parseDir(d, io.cwd)));
        const env = parseEnv(opts.env, io.env);
        const limits = {
          timeoutMs: positiveInt(opts.timeoutMs, '--timeout-ms'),
          memoryMb: Math.min(positiveInt(opts.memoryMb, '--memory-mb'), 4096),
          outputBytes: positiveInt(opts.outputBytes, '--output-bytes'),
          writeBytes: positiveInt(opts.writeBytes, '--write-bytes'),
        };
        const cancel = cancelOnSignals(io.signals, ['SIGINT']);
        try {
          const result = await runUngatedModule(
            {
              file,
              programName: modulePath,
              args,
              env,
              input: await readStdin(io),
              dirs,
              ...limits,
              signal: cancel.signal,
            },
            { cacheDir: userCacheDir(io.env) },
          );
          const code = result.timedOut
            ? EXIT.TIMEOUT
            : result.canceled
              ? EXIT.CANCELED
              : (result.exitCode ?? EXIT.FAILURE);
          if (opts.json === true) {
            const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');
            await write(
              io.stdout,
              json({ module: file, ...result, stdout: text(result.stdout), stderr: text(result.stderr) }),
            );
            return code;
          }
          await writeBytes(io.stdout, result.stdout);
          await writeBytes(io.stderr, result.stderr);
          if (result.truncated)
            await writeBytes(io.stderr, Buffer.from(`capsule: output cut at ${limits.outputBytes} bytes\n`));
          if (result.writeLimited === true)
            await writeBytes(
              io.stderr,
              Buffer.from(`capsule: write limit of ${limits.writeBytes} bytes reached (--write-bytes)\n`),
            );
          if (result.oomKilled)
            await writeBytes(
              io.stderr,
              Buffer.from(`capsule: memory limit of ${limits.memoryMb} MiB reached\n`),
            );
          return code;
        } finally {
          cancel.detach();
        }
      }),
    );
}
