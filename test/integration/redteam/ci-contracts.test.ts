import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { XMLParser } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { tempProject, writeCapability, writeManifest } from '../../helpers/capability.js';
import { builtCli } from '../../helpers/cli.js';
import { assemble } from '../runners/wasm/helpers.js';

// Attacks on what `capsule ci` judges: cases whose `expect` blesses a run that broke a contract capsule
// checks on every run — output that breaks the manifest's outputSchema (under each expect kind), a run
// that hit its write limit, a run whose request the egress policy refused. Each case's expect matches
// what the run printed, so a CI that looked only at expect would pass. Judged by the exit code and the
// JUnit report a CI system reads (the failure's type names the contract).

interface JunitCase {
  name: string;
  failure?: { type?: string; message: string };
}

interface Suite {
  testcase: JunitCase | JunitCase[];
}

async function ci(root: string, grants: string[]): Promise<{ code: number; cases: JunitCase[] }> {
  const junit = path.join(root, 'report.xml');
  const r = await builtCli(['ci', ...grants.flatMap((g) => ['--grant', g]), '--junit', junit, '--force'], {
    cwd: root,
  });
  const doc = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '' }).parse(
    await readFile(junit, 'utf8'),
  ) as { testsuites: { testsuite: Suite | Suite[] } };
  const many = <T>(x: T | T[]): T[] => (Array.isArray(x) ? x : [x]);
  const list = many(doc.testsuites.testsuite).flatMap((suite) => many(suite.testcase));
  const cases = list.map((c) => ({
    name: c.name,
    ...(c.failure !== undefined ? { failure: { type: c.failure.type, message: c.failure.message } } : {}),
  }));
  return { code: r.code, cases };
}

const cases = (list: unknown[]): string => JSON.stringify({ schemaVersion: 1, cases: list });

describe('red team: capsule ci judges every contract of a run', () => {
  it('output that breaks outputSchema fails under each expect kind, and the report names the schema', async () => {
    const { root, capRoot } = await tempProject('capsule-redteam-ci-');
    const stdout = '{"count":"three"}';
    const schema = {
      type: 'object',
      properties: { count: { type: 'integer' } },
      required: ['count'],
    };
    for (const [name, outputSchema] of [
      ['liar', schema],
      // The control: the same program and cases without the schema pass.
      ['plain', undefined],
    ] as const) {
      await writeCapability(capRoot, name, outputSchema === undefined ? {} : { outputSchema }, {
        'run.sh': `printf '%s' '${stdout}'\n`,
      });
      await writeFile(
        path.join(capRoot, name, 'cases.json'),
        cases([
          { name: 'stdout', expect: { stdout } },
          { name: 'contains', expect: { contains: 'three' } },
          { name: 'json', expect: { json: { count: 'three' } } },
        ]),
      );
    }
    const r = await ci(root, ['run_capability:liar', 'run_capability:plain']);
    expect(r.code).toBe(1);
    const liar = r.cases.slice(0, 3);
    const byName = new Map(liar.map((c) => [c.name, c]));
    for (const kind of ['stdout', 'contains', 'json']) {
      const c = byName.get(`${kind} [shell]`);
      expect(c?.failure?.type, kind).toBe('outputSchema');
      expect(c?.failure?.message, kind).toMatch(/^outputSchema: .*count/);
    }
    // plain's three cases (the same output, no schema) passed: only liar's failed.
    expect(r.cases.slice(3).map((c) => [c.name, c.failure])).toEqual([
      ['stdout [shell]', undefined],
      ['contains [shell]', undefined],
      ['json [shell]', undefined],
    ]);
  });

  it('a run that hit limits.writeBytes fails even when its case expects the failure it caused', async () => {
    const { root, capRoot } = await tempProject('capsule-redteam-ci-');
    await mkdir(path.join(root, 'data'));
    const dir = path.join(capRoot, 'filler');
    await mkdir(dir);
    await writeFile(path.join(dir, 'probe.wasm'), assemble('probe.wat'));
    const manifest = {
      schemaVersion: 1,
      name: 'filler',
      description: 'writes until the disk (its write limit) says no, then exits with that errno',
      environment: 'wasm',
      entry: 'probe.wasm',
      args: ['Fill', 'out.bin'],
      limits: { writeBytes: 65536 },
      grants: { fs: [{ path: 'data', mode: 'rw' }] },
    };
    await writeManifest(dir, manifest);
    // ENOSPC is errno 51: the case "expects" exactly what the limit did.
    await writeFile(
      path.join(dir, 'cases.json'),
      cases([{ name: 'fills', expect: { exitCode: 51, stdout: '' } }]),
    );
    const r = await ci(root, ['run_capability:filler']);
    expect(r.code).toBe(1);
    expect(r.cases[0]?.failure?.type).toBe('limits.writeBytes');
    // The control: with room for the run the same case fails on its exit code, not the limit.
    await writeManifest(dir, { ...manifest, args: ['write', 'small.txt'] });
    const control = await ci(root, ['run_capability:filler']);
    expect(control.cases[0]?.failure?.type).toBe('exitCode');
  });

  it('a run whose request the egress policy refused fails, though the component exits 0 with what its case expects', async () => {
    const { root, capRoot } = await tempProject('capsule-redteam-ci-');
    const shipped = fileURLToPath(new URL('../../../capabilities/fetch-wasm/', import.meta.url));
    const dir = path.join(capRoot, 'fetch-wasm');
    await mkdir(dir);
    for (const f of ['capability.json', 'fetch.js', 'fetch.wasm'])
      await copyFile(path.join(shipped, f), path.join(dir, f));
    // grants.network names example.com only; loopback port 9 is never granted (and never connected to).
    await writeFile(
      path.join(dir, 'cases.json'),
      cases([{ name: 'refused', input: { url: 'http://127.0.0.1:9/' }, expect: { contains: '"hops"' } }]),
    );
    const r = await ci(root, ['run_capability:fetch-wasm']);
    expect(r.code).toBe(1);
    expect(r.cases[0]?.failure?.type).toBe('grants.network');
    expect(r.cases[0]?.failure?.message).toMatch(/127\.0\.0\.1:9/);
  });

  it('a denied run fails every case with type permission (exit 77: a grant is missing)', async () => {
    const { root, capRoot } = await tempProject('capsule-redteam-ci-');
    await writeCapability(capRoot, 'echo', {}, { 'run.sh': 'cat\n' });
    await writeFile(path.join(capRoot, 'echo', 'cases.json'), cases([{ name: 'a', expect: { json: {} } }]));
    const r = await ci(root, []);
    expect(r.code).toBe(77);
    expect(r.cases[0]?.failure?.type).toBe('permission');
  });
});
