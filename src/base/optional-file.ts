import { readFile } from 'node:fs/promises';

/**
 * A file that may not be there: its contents, or undefined when it does not exist (ENOENT). Any other
 * failure (a folder in its place, no permission, a symlink loop) is thrown — as it came, or as
 * `failure(err)` so a caller names the file in its own error: "there but unreadable" is never taken for
 * "absent".
 */
export async function readOptionalFile(file: string): Promise<Buffer | undefined>;
export async function readOptionalFile(
  file: string,
  encoding: BufferEncoding,
  failure?: (err: NodeJS.ErrnoException) => Error,
): Promise<string | undefined>;
export async function readOptionalFile(
  file: string,
  encoding?: BufferEncoding,
  failure?: (err: NodeJS.ErrnoException) => Error,
): Promise<Buffer | string | undefined> {
  try {
    return encoding === undefined ? await readFile(file) : await readFile(file, encoding);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw failure === undefined ? err : failure(err as NodeJS.ErrnoException);
  }
}
