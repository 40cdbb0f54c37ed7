import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { fieldPath, zodIssues } from '../../../src/base/zod-issues.js';
import { parseManifest } from '../../../src/manifest/parse.js';
import { relativePath } from '../../../src/manifest/schema.js';

const valid = {
  schemaVersion: 1,
  name: 'hello',
  description: 'says hello',
  environment: 'shell',
  entry: 'run.sh',
  interpreter: 'sh',
};

function issuesOf(doc: unknown): Array<{ field?: string | undefined; message: string }> {
  const r = parseManifest(typeof doc === 'string' ? doc : JSON.stringify(doc));
  if (r.ok) throw new Error('expected the manifest to be rejected');
  return r.issues;
}

describe('parseManifest', () => {
  it('says what a wrong type got, and "is required" only for a missing field', () => {
    expect(issuesOf({ ...valid, limits: { timeoutMs: '5000' } })).toEqual([
      { field: 'limits.timeoutMs', message: 'expected a number, got "5000"' },
    ]);
    expect(issuesOf({ ...valid, grants: { env: 'HOME' } })).toEqual([
      { field: 'grants.env', message: 'expected an array, got "HOME"' },
    ]);
    const { description: _, ...missing } = valid;
    expect(issuesOf(missing)).toEqual([{ field: 'description', message: 'is required' }]);
  });

  it('accepts a minimal manifest and fills defaults (deny by default)', () => {
    const r = parseManifest(JSON.stringify(valid));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.manifest.grants).toEqual({ fs: [], network: [], env: [] });
    expect(r.manifest.limits).toEqual({
      timeoutMs: 10_000,
      memoryMb: 256,
      outputBytes: 1024 * 1024,
      pids: 64,
      writeBytes: 64 * 1024 * 1024,
      networkRequests: 100,
      networkBytes: 16 * 1024 * 1024,
    });
    expect(r.manifest.inputSchema).toEqual({ type: 'object' });
  });

  it('rejects invalid JSON with the parser message', () => {
    expect(issuesOf('{ "name": ')[0]?.message).toMatch(/not valid JSON/);
  });

  it('rejects a non-object document', () => {
    expect(issuesOf([1, 2])[0]?.message).toMatch(/JSON object/);
  });

  it('rejects an unknown schemaVersion, naming the field', () => {
    const [issue] = issuesOf({ ...valid, schemaVersion: 2 });
    expect(issue?.field).toBe('schemaVersion');
    expect(issue?.message).toMatch(/must be 1/);
  });

  it('names every missing required field', () => {
    const fields = issuesOf({ schemaVersion: 1 }).map((i) => i.field);
    expect(fields).toEqual(expect.arrayContaining(['name', 'description', 'environment', 'entry']));
  });

  it('names unknown fields, also nested ones', () => {
    const issues = issuesOf({ ...valid, privileged: true, limits: { timeoutMs: 5, cpus: 4 } });
    expect(issues.map((i) => i.field)).toEqual(expect.arrayContaining(['privileged', 'limits.cpus']));
    expect(issues[0]?.message).toMatch(/not a known field/);
  });

  it.each([['a/b'], ['..'], ['two words'], ['a'.repeat(300)], [''], ['-x'], ['Upper']])(
    'rejects the name %j',
    (name) => {
      expect(issuesOf({ ...valid, name }).map((i) => i.field)).toContain('name');
    },
  );

  it.each([['../x.sh'], ['/bin/sh'], ['a/../../b'], ['a\\b'], ['C:/x']])(
    'rejects the entry path %j',
    (entry) => {
      expect(issuesOf({ ...valid, entry }).map((i) => i.field)).toContain('entry');
    },
  );

  it('rejects a grant path that climbs out', () => {
    const issues = issuesOf({ ...valid, grants: { fs: [{ path: '../..', mode: 'rw' }] } });
    expect(issues[0]?.field).toBe('grants.fs[0].path');
  });

  it('requires docker settings for docker and forbids them elsewhere', () => {
    expect(issuesOf({ ...valid, environment: 'docker' })[0]?.field).toBe('docker');
    expect(issuesOf({ ...valid, docker: { image: 'capsule/busybox' } })[0]?.field).toBe('docker');
  });

  it('requires a .wasm entry for wasm', () => {
    const { interpreter: _, ...noInterpreter } = valid;
    expect(issuesOf({ ...noInterpreter, environment: 'wasm', entry: 'main.js' })[0]?.field).toBe('entry');
  });

  it('rejects out-of-range limits and bad env names', () => {
    const fields = issuesOf({
      ...valid,
      limits: { timeoutMs: 0, outputBytes: -1 },
      grants: { env: ['A=B'] },
    }).map((i) => i.field);
    expect(fields).toEqual(
      expect.arrayContaining(['limits.timeoutMs', 'limits.outputBytes', 'grants.env[0]']),
    );
  });
});

describe('field names as a person reads them', () => {
  it('a key a dot would misread is in brackets; plain keys keep their dots', () => {
    expect(fieldPath(['files', '../escape.txt'])).toBe('files["../escape.txt"]');
    expect(fieldPath(['files', 'cases.json'])).toBe('files["cases.json"]');
    expect(fieldPath(['grants', 'fs', 0, 'path'])).toBe('grants.fs[0].path');
    expect(fieldPath(['allowlist', 'run_capability:hello'])).toBe('allowlist.run_capability:hello');
  });

  it("a record key that breaks its schema names the key and the rule, not zod's 'Invalid key in record'", () => {
    const schema = z.object({ files: z.record(relativePath, z.string()) });
    const input = { files: { '../escape.txt': 'x' } };
    const parsed = schema.safeParse(input);
    expect(parsed.success).toBe(false);
    const [issue] = zodIssues((parsed as { error: z.ZodError }).error, input);
    expect(issue?.field).toBe('files["../escape.txt"]');
    expect(issue?.message).toBe('is not an allowed name: it must not contain a ".." segment');
  });
});
