import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import type { CliInput, CliIO, SignalSource } from '../../src/cli/output.js';

/** A CliIO in memory: what the command writes is collected; stdin and signals are the test's. */
export function memoryIO(options: {
  cwd: string;
  env: NodeJS.ProcessEnv;
  stdin?: CliInput;
  signals?: SignalSource;
}): { io: CliIO; stdout: () => string; stderr: () => string } {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (c: Buffer) => (out += c.toString()));
  stderr.on('data', (c: Buffer) => (err += c.toString()));
  const io: CliIO = {
    stdin: () => options.stdin ?? new PassThrough().end(),
    signals: options.signals ?? new EventEmitter(),
    stdout,
    stderr,
    cwd: options.cwd,
    env: options.env,
    interactive: false,
    exitCode: 0,
  };
  return { io, stdout: () => out, stderr: () => err };
}
