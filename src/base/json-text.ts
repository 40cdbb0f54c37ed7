import type { CapsuleError } from './errors.js';

/**
 * `text` as JSON, or the CapsuleError `fail` makes of the parser's reason (with the parser's error as its
 * cause): for input handed to capsule, whose syntax error is the sender's to fix. Documents capsule treats
 * as policy go through parseStrictJson instead.
 */
export function parseJsonText(
  text: string,
  fail: (reason: string, options: { cause: unknown }) => CapsuleError,
): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw fail((err as Error).message, { cause: err });
  }
}
