import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { XMLParser } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';

const passing = {
  schemaVersion: 1,
  cases: [{ name: 'echoes', input: { a: 1 }, expect: { json: { a: 1 } } }],
};

async function project(): Promise<string> {
  const { root, capRoot } = await tempProject();
  const echo = { 'run.sh': 'cat\n' };
  await writeCapability(capRoot, 'echo', {}, echo);
  await writeFile(
    path.join(capRoot, 'echo', 'cases.json'),
    JSON.stringify({
      schemaVersion: 1,
      cases: [
        { name: 'echoes', input: { a: 1 }, expect: { json: { a: 1 } } },
        { name: 'wrong on purpose', input: { a: 1 }, expect: { json: { a: 2 } } },
        { name: 'no expectation', input: {}, expect: {} },
      ],
    }),
  );
  await writeCapability(capRoot, 'untested', {}, echo);
  return root;
}

describe('capsule ci', () => {
  it('runs checks non-interactively, writes JUnit, and exits 1 on any failure', async () => {
    const root = await project();
    const junit = path.join(root, 'report.xml');
    const r = await cli(['ci', '--grant', 'run_capability:echo', '--junit', junit], { cwd: root });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('1 passed, 2 failed, 0 errors');
    expect(r.stdout).toContain('no cases.json: untested');
    expect(r.stderr).toMatch(/^PASS {2}echo \/ echoes \[shell\]/m);
    expect(r.stderr).toMatch(/^FAIL {2}echo \/ no expectation \[shell\] .*no expected output/m);
    const doc = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '' }).parse(
      await readFile(junit, 'utf8'),
    );
    expect(doc.testsuites).toMatchObject({ tests: '3', failures: '2', errors: '0' });
    expect(doc.testsuites.testsuite.testcase.map((t: { name: string }) => t.name)).toEqual([
      'echoes [shell]',
      'wrong on purpose [shell]',
      'no expectation [shell]',
    ]);
  });

  it('treats Ask as a denial without a grant, and refuses to overwrite a report without --force', async () => {
    const root = await project();
    const junit = path.join(root, 'report.xml');
    await writeFile(junit, 'precious');
    const refused = await cli(['ci', '--junit', junit], { cwd: root });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('--force');
    expect(await readFile(junit, 'utf8')).toBe('precious');
    const denied = await cli(['ci', '--json', '--junit', junit, '--force'], { cwd: root });
    expect(denied.code).toBe(77);
    const doc = JSON.parse(denied.stdout) as {
      failed: number;
      denied: number;
      outcomes: Array<{ message: string }>;
    };
    expect(doc.failed).toBe(3);
    expect(doc.denied).toBe(3);
    expect(doc.outcomes[0]?.message).toContain('run_capability:echo');
  });

  it('passes on every shipped example in every environment it is portable to', async () => {
    const r = await cli(['ci', '--env', 'shell,wasm,docker', '--grant', 'run_capability:*', '--json']);
    const doc = JSON.parse(r.stdout) as {
      failed: number;
      errors: number;
      outcomes: Array<{ capability: string; environment: string; status: string; message?: string }>;
    };
    expect(doc.outcomes.filter((o) => o.status === 'failed' || o.status === 'error')).toEqual([]);
    expect(r.code).toBe(0);
    const ran = (name: string): string[] => [
      ...new Set(
        doc.outcomes.filter((o) => o.capability === name && o.status === 'passed').map((o) => o.environment),
      ),
    ];
    // hello is authored in JavaScript: it runs (and passes) everywhere.
    expect(ran('hello')).toEqual(['shell', 'wasm', 'docker']);
    expect(ran('word-count')).toEqual(['shell', 'docker']);
    expect(ran('hello-docker')).toEqual(['docker']);
    // digest-notes imports wasi:filesystem: only the Wasm host runs it.
    expect(ran('digest-notes')).toEqual(['wasm']);
    const skipped = doc.outcomes.find((o) => o.capability === 'word-count' && o.environment === 'wasm');
    expect(skipped).toMatchObject({
      status: 'skipped',
      message: expect.stringMatching(/not portable to wasm/),
    });
  });

  it("errors (exit 1) when a requested environment's runner is unavailable", async () => {
    const root = await project();
    const env = { ...process.env, DOCKER_HOST: `unix://${path.join(root, 'no-engine.sock')}` };
    const r = await cli(['ci', '--env', 'shell,docker', '--grant', 'run_capability:echo', '--json'], {
      cwd: root,
      env,
    });
    expect(r.code).toBe(1);
    const doc = JSON.parse(r.stdout) as {
      outcomes: Array<{ environment: string; status: string; message?: string }>;
    };
    const docker = doc.outcomes.filter((o) => o.environment === 'docker');
    expect(docker.length).toBe(3);
    expect(docker.every((o) => o.status === 'error' && /no-engine\.sock/.test(o.message ?? ''))).toBe(true);
    expect(doc.outcomes.filter((o) => o.environment === 'shell' && o.status === 'passed')).toHaveLength(1);
  });

  it('exits 77 when the only failures are denials, and the denied capability never ran', async () => {
    const { root, capRoot } = await tempProject();
    const marker = path.join(root, 'ran');
    await writeCapability(capRoot, 'good', {}, { 'run.sh': 'cat\n' });
    await writeFile(path.join(capRoot, 'good', 'cases.json'), JSON.stringify(passing));
    await writeCapability(capRoot, 'ungranted', {}, { 'run.sh': `touch ${marker}\ncat\n` });
    await writeFile(path.join(capRoot, 'ungranted', 'cases.json'), JSON.stringify(passing));
    const r = await cli(['ci', '--grant', 'run_capability:good'], { cwd: root });
    expect(existsSync(marker)).toBe(false);
    expect(r.stdout).toContain('1 passed, 1 failed, 0 errors\n1 case denied: run_capability:ungranted —');
    expect(r.stderr).toMatch(/^FAIL {2}ungranted .* — denied$/m);
    expect(r.code).toBe(77);
    // Granted, the same project passes: the 77 was the missing grant and nothing else.
    const granted = await cli(
      ['ci', '--grant', 'run_capability:good', '--grant', 'run_capability:ungranted'],
      {
        cwd: root,
      },
    );
    expect(existsSync(marker)).toBe(true);
    expect(granted.code).toBe(0);
  });

  it('exits 1 when a case fails on its own, even if others were denied (a failure outranks a denial)', async () => {
    const root = await project();
    const capRoot = path.join(root, 'capabilities');
    await writeCapability(capRoot, 'ungranted', {}, { 'run.sh': 'cat\n' });
    await writeFile(path.join(capRoot, 'ungranted', 'cases.json'), JSON.stringify(passing));
    const r = await cli(['ci', '--json', '--grant', 'run_capability:echo'], { cwd: root });
    const doc = JSON.parse(r.stdout) as { failed: number; denied: number };
    expect(doc).toMatchObject({ failed: 3, denied: 1 });
    expect(r.code).toBe(1);
  });
});
