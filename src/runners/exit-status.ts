import { constants as osConstants } from 'node:os';

/** A process's exit status as a shell reports it: the code, or 128 + the signal number. */
export function exitStatus(exitCode: number | null, signal: string | null, fallback: number): number {
  if (exitCode !== null) return exitCode;
  if (signal !== null) {
    const n = (osConstants.signals as Record<string, number | undefined>)[signal];
    if (n !== undefined) return 128 + n;
  }
  return fallback;
}
