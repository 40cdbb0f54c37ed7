import { stat } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';

/**
 * The file a report flag (`--junit`, `--html`) names, checked before anything runs: it must not exist
 * unless `--force`, and its folder must. A mistake there is the user's, found before a long run, not
 * an internal error after it.
 */
export async function reportTarget(
  cwd: string,
  value: string | undefined,
  flag: string,
  force: boolean,
): Promise<string | undefined> {
  if (value === undefined) return undefined;
  const file = path.resolve(cwd, value);
  const existing = await stat(file).catch(() => undefined);
  if (existing?.isDirectory() === true) {
    throw new CapsuleError('USAGE', `${flag} ${file} is a folder, not a file.`, {
      file,
      field: flag,
      hint: `Give a file name, e.g. ${flag} ${path.join(value, flag === '--html' ? 'report.html' : 'report.xml')}.`,
    });
  }
  if (existing !== undefined && !force) {
    throw new CapsuleError('ALREADY_EXISTS', `${file} already exists.`, {
      file,
      field: flag,
      hint: 'Pass --force to overwrite it.',
    });
  }
  const folder = await stat(path.dirname(file)).catch(() => undefined);
  if (folder?.isDirectory() !== true) {
    throw new CapsuleError('NOT_FOUND', `${flag} ${file}: the folder ${path.dirname(file)} does not exist.`, {
      file,
      field: flag,
      hint: 'Create the folder first, or give a file in an existing one.',
    });
  }
  return file;
}

/** Write a report through `write` (the atomic writer); a refusal (read-only folder, full disk) names the flag. */
export async function writeReport(
  write: (file: string, text: string) => Promise<void>,
  file: string,
  text: string,
  flag: string,
): Promise<void> {
  try {
    await write(file, text);
  } catch (err) {
    throw new CapsuleError(
      'NOT_FOUND',
      `Cannot write ${flag} ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`,
      { file, field: flag, hint: 'Give a file in a folder capsule can write to.' },
      { cause: err },
    );
  }
}
