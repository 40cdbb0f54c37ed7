import type { z } from 'zod';
import { parseStrictJson } from '../config/strict-json.js';
import { manifestSchema, type Manifest } from './schema.js';

export interface ManifestIssue {
  field?: string | undefined;
  message: string;
}

export type ParseResult = { ok: true; manifest: Manifest } | { ok: false; issues: ManifestIssue[] };

/** Dotted field path for a zod issue: `limits.timeoutMs`, `grants.fs[0].path`. */
export function fieldPath(path: ReadonlyArray<PropertyKey>): string | undefined {
  if (path.length === 0) return undefined;
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out;
}

export function zodIssues(error: z.ZodError): ManifestIssue[] {
  return error.issues.flatMap((issue) => {
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({
        field: fieldPath([...issue.path, key]),
        message: 'is not a known field (check the spelling; see docs/manifest.md)',
      }));
    }
    // zod's own wording for a missing field; a schema's custom message (grants.network) is kept.
    if (
      issue.code === 'invalid_type' &&
      issue.input === undefined &&
      issue.message.startsWith('Invalid input')
    ) {
      return [{ field: fieldPath(issue.path), message: 'is required' }];
    }
    return [{ field: fieldPath(issue.path), message: issue.message }];
  });
}

/**
 * Pure: manifest text in, validated manifest or every issue out. No I/O; the loader
 * adds the checks that need the disk (real paths, symlinks, folder name).
 */
export function parseManifest(text: string): ParseResult {
  const json = parseStrictJson(text);
  if (!json.ok) {
    return json.kind === 'duplicate-key'
      ? { ok: false, issues: [{ field: json.field, message: json.message }] }
      : { ok: false, issues: [{ message: `is not valid JSON: ${json.message}` }] };
  }
  const raw = json.value;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return { ok: false, issues: [{ message: 'must be a JSON object' }] };
  }
  const parsed = manifestSchema.safeParse(raw);
  if (!parsed.success) return { ok: false, issues: zodIssues(parsed.error) };
  return { ok: true, manifest: parsed.data };
}
