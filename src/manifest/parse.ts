import { parseStrictJson } from '../base/strict-json.js';
import { zodIssues, type FieldIssue } from '../base/zod-issues.js';
import { manifestSchema, type Manifest } from './schema.js';

export type ParseResult = { ok: true; manifest: Manifest } | { ok: false; issues: FieldIssue[] };

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
  if (!parsed.success) return { ok: false, issues: zodIssues(parsed.error, raw) };
  return { ok: true, manifest: parsed.data };
}
