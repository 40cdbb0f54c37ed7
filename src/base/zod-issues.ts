import type { z } from 'zod';

/** One problem in a parsed document: the dotted field it is at, and what is wrong with it. */
export interface FieldIssue {
  field?: string | undefined;
  message: string;
}

/** A key a dot would misread (a file name, a path, spaces): written as `["…"]`, the way a person reads it. */
const NEEDS_BRACKETS = /^$|[./\\\s"'[\]]/;

/** Field path for a zod issue: `limits.timeoutMs`, `grants.fs[0].path`, `files["../escape.txt"]`. */
export function fieldPath(path: ReadonlyArray<PropertyKey>): string | undefined {
  if (path.length === 0) return undefined;
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else if (NEEDS_BRACKETS.test(String(part))) out += `[${JSON.stringify(String(part))}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out;
}

/** What was at `path` in the parsed input (undefined when it is not there). */
function valueAt(input: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let at: unknown = input;
  for (const part of path) {
    if (at === null || typeof at !== 'object') return undefined;
    at = (at as Record<PropertyKey, unknown>)[part];
  }
  return at;
}

/** A value as a message shows it: JSON, cut short. */
function shown(value: unknown): string {
  const text = Array.isArray(value) ? 'an array' : value === null ? 'null' : JSON.stringify(value);
  return text.length > 40 ? `${text.slice(0, 39)}…` : text;
}

/**
 * The one formatter of zod issues for every on-disk document and tool call: each issue as a dotted
 * field and what was wrong with it. `input` is what was parsed, so a wrong type says what it got
 * (`expected a number, got "5000"`) and only a missing field says "is required".
 */
export function zodIssues(error: z.ZodError, input: unknown): FieldIssue[] {
  return error.issues.flatMap((issue) => {
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({
        field: fieldPath([...issue.path, key]),
        message: 'is not a known field (check the spelling; see docs/manifest.md)',
      }));
    }
    // A record key that fails its own schema (`files` names): what is wrong with the key, not zod's
    // "Invalid key in record"; the path already ends in the key.
    if (issue.code === 'invalid_key') {
      const why = issue.issues.map((i) => i.message).join('; ');
      return [{ field: fieldPath(issue.path), message: `is not an allowed name: it ${why}` }];
    }
    // A schema's own message (grants.network) is kept; zod's generic wording gets a precise one.
    if (issue.code === 'invalid_type' && issue.message.startsWith('Invalid input')) {
      const value = valueAt(input, issue.path);
      if (value === undefined) return [{ field: fieldPath(issue.path), message: 'is required' }];
      const expected = String(issue.expected);
      const article = /^[aeiou]/.test(expected) ? 'an' : 'a';
      return [
        { field: fieldPath(issue.path), message: `expected ${article} ${expected}, got ${shown(value)}` },
      ];
    }
    return [{ field: fieldPath(issue.path), message: issue.message }];
  });
}

/** zodIssues of a document read from `file`, each naming the file (a CapsuleError's `issues`). */
export function fileIssues(
  error: z.ZodError,
  input: unknown,
  file: string,
): Array<{ file: string; field: string | undefined; message: string }> {
  return zodIssues(error, input).map((i) => ({ file, field: i.field, message: i.message }));
}
