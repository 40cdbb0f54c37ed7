import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { manifestSchema } from '../../../src/manifest/schema.js';
import { REPO_ROOT } from '../../helpers/cli.js';

/** Every property path of a JSON Schema object, e.g. `limits.timeoutMs`, `grants.fs[].path`. */
function fieldPaths(schema: Record<string, unknown>, prefix = ''): string[] {
  const out: string[] = [];
  const props = (schema.properties ?? {}) as Record<string, Record<string, unknown>>;
  for (const [name, sub] of Object.entries(props)) {
    const here = prefix ? `${prefix}.${name}` : name;
    out.push(here);
    if (sub.type === 'object' && sub.properties && name !== 'inputSchema') out.push(...fieldPaths(sub, here));
    const items = sub.items as Record<string, unknown> | undefined;
    if (sub.type === 'array' && items?.type === 'object') out.push(...fieldPaths(items, `${here}[]`));
  }
  return out;
}

describe('docs/manifest.md', () => {
  it('documents every manifest field', () => {
    const doc = readFileSync(path.join(REPO_ROOT, 'docs', 'manifest.md'), 'utf8');
    const fields = fieldPaths(z.toJSONSchema(manifestSchema, { io: 'input' }) as Record<string, unknown>);
    expect(fields.length).toBeGreaterThan(20);
    const missing = fields.filter((f) => !doc.includes(`\`${f}\``));
    expect(missing).toEqual([]);
  });
});
