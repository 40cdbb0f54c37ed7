import { readFile } from 'node:fs/promises';

/**
 * The text of a file that may be absent: undefined when it does not exist. Any other failure to read it is
 * thrown as `failure(err)`, so each caller names the file in its own error.
 */
export async function readOptionalFile(
  file: string,
  failure: (err: NodeJS.ErrnoException) => Error,
): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw failure(err as NodeJS.ErrnoException);
  }
}
