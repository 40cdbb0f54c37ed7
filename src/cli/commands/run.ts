import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { CapsuleError } from '../../base/errors.js';
import type { RunResult } from '../../runners/types.js';
import { runExitCode } from '../exit-codes.js';
import { addEngineFlag, addGateFlags, sessionFlags, type GateFlags } from '../flags.js';
import { action, cancelOnSignals, json, write, type CliIO } from '../output.js';

/** One line on stderr when a limit ended the run, so a person sees why the output stops. */
export function limitNote(result: RunResult, timeoutMs: number, outputBytes: number): string {
  const notes: string[] = [];
  if (result.timedOut) notes.push(`timed out after ${timeoutMs} ms (limits.timeoutMs) and was killed`);
  if (result.truncated)
    notes.push(`output passed ${outputBytes} bytes (limits.outputBytes): cut and the run killed`);
  if (result.oomKilled) notes.push('hit its memory limit (limits.memoryMb) and was killed');
  if (result.pidsLimited === true) notes.push('hit its process limit (limits.pids) and was stopped');
  if (result.writeLimited === true)
    notes.push('hit its write limit (limits.writeBytes): later writes to its folders failed with "no space"');
  if (result.canceled) notes.push('was canceled');
  if (result.outputInvalid !== undefined) notes.push(`failed: ${result.outputInvalid}`);
  return notes.length ? `capsule: the run ${notes.join('; ')}\n` : '';
}

async function readInput(opts: { input?: string; inputFile?: string }): Promise<unknown> {
  if (opts.input !== undefined && opts.inputFile !== undefined) {
    throw new CapsuleError('USAGE', 'Use either --input or --input-file, not both.');
  }
  let text = opts.input ?? '{}';
  if (opts.inputFile !== undefined) {
    try {
      text = await readFile(opts.inputFile, 'utf8');
    } catch (err) {
      throw new CapsuleError(
        'NOT_FOUND',
        `Cannot read --input-file ${opts.inputFile}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`,
        {},
        { cause: err },
      );
    }
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new CapsuleError(
      'INPUT_INVALID',
      `--input is not valid JSON: ${(err as Error).message}`,
      {
        field: '--input',
        hint: `Quote the JSON for your shell, e.g. --input '{"name":"world"}'.`,
      },
      { cause: err },
    );
  }
}

export function registerRun(program: Command, io: CliIO): void {
  addGateFlags(
    addEngineFlag(
      program
        .command('run')
        .description(
          "Run a capability through the permission gate. Its stdout/stderr pass through and its exit code is capsule's exit code.\n" +
            "capsule's own codes: 64 usage, 65 invalid input/manifest, 66 not found, 69 runner unavailable, 77 permission denied, 124 timed out, 130 canceled.",
        )
        .argument('<name>', 'capability name (see capsule list)')
        .option('--input <json>', 'input document as JSON (default {})')
        .option('--input-file <file>', 'read the input document from a file')
        .option(
          '--json',
          'print one JSON document with the decision and the whole result instead of passing output through',
        ),
    ),
  ).action(
    action(
      io,
      async (name: string, opts: GateFlags & { input?: string; inputFile?: string; json?: boolean }) => {
        const input = await readInput(opts);
        const { openSession } = await import('../session.js');
        const session = await openSession(io, sessionFlags(opts, { command: 'run', json: opts.json }));
        // Ctrl-C or SIGTERM stops the run at once (every runner), and capsule exits 130.
        const cancel = cancelOnSignals(io.signals, ['SIGINT', 'SIGTERM']);
        try {
          // The capability that was judged and run: no second read of its folder.
          const {
            decision,
            result,
            capability: cap,
          } = await session.executor.run(name, input, {
            signal: cancel.signal,
          });
          if (opts.json) {
            await write(
              io.stdout,
              json({ capability: name, contentHash: cap.contentHash, decision, result }),
            );
          } else {
            // Output that broke the outputSchema is not passed on: nothing downstream reads it as valid.
            if (result.outputInvalid === undefined) await write(io.stdout, result.stdout);
            await write(io.stderr, result.stderr);
            await write(
              io.stderr,
              limitNote(result, cap.manifest.limits.timeoutMs, cap.manifest.limits.outputBytes),
            );
          }
          return runExitCode(result);
        } finally {
          cancel.detach();
          await session.close();
        }
      },
    ),
  );
}
