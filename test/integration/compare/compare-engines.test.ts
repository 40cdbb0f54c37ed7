import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { CompareReport } from '../../../src/compare/compare.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { cli } from '../../helpers/cli.js';
import { created } from '../runners/docker/helpers.js';

// `capsule compare NAME --engine a,b`: the same capability on two real engines (the pool engines of
// scripts/extra-engines.sh), one column per engine. Judged by each engine's own event log (the call's
// containers were created there) as well as by the report's rows.

const ENGINES_ROOT = process.env['CAPSULE_ENGINES_ROOT'] ?? '/var/lib/capsule-engines';

describe('capsule compare across engines', () => {
  let hosts: Record<string, string>;

  beforeAll(async () => {
    const index = JSON.parse(await readFile(path.join(ENGINES_ROOT, 'engines.json'), 'utf8')) as {
      engines: Record<string, { host: string }>;
    };
    hosts = Object.fromEntries(Object.entries(index.engines).map(([n, e]) => [n, e.host]));
  });

  it('--engine a,b puts docker on each engine side by side (JSON, table and HTML rows), each engine running its own calls', async () => {
    const { root, capRoot } = await tempProject('capsule-compare-engines-');
    await writeCapability(
      capRoot,
      'two-engines',
      { environment: 'docker', docker: { image: 'capsule/busybox:1' } },
      { 'run.sh': 'echo "got $(cat)"\n' },
    );
    const env = {
      ...process.env,
      XDG_STATE_HOME: path.join(root, '.state'),
      CAPSULE_ENGINES: JSON.stringify({
        a: { type: 'docker', host: hosts['pool-a'] },
        b: { type: 'docker', host: hosts['pool-b'] },
      }),
    };
    const since = Math.floor(Date.now() / 1000) - 1;
    const args = ['compare', 'two-engines', '--env', 'docker', '--engine', 'a,b', '--runs', '2'];
    const grant = ['--grant', 'run_capability:two-engines', '--input', '{"n":1}'];
    const r = await cli([...args, ...grant, '--json', '--html', 'report.html'], { cwd: root, env });
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as CompareReport;
    expect(report.environments.map((e) => [e.environment, e.engine, e.status])).toEqual([
      ['docker', 'a', 'ok'],
      ['docker', 'b', 'ok'],
    ]);
    for (const e of report.environments)
      expect(e.runs[0]).toMatchObject({ stdout: 'got {"n":1}\n', exitCode: 0 });
    expect(report.equal).toBe(true);
    // Each engine ran its column's calls: its own event log has the call containers.
    expect(await created(hosts['pool-a'] as string, 'two-engines', since)).toBeGreaterThanOrEqual(1);
    expect(await created(hosts['pool-b'] as string, 'two-engines', since)).toBeGreaterThanOrEqual(1);
    const html = await readFile(path.join(root, 'report.html'), 'utf8');
    expect(html).toContain('data-engine="a"><td>docker@a</td>');
    expect(html).toContain('data-engine="b"><td>docker@b</td>');
    const table = await cli([...args, ...grant], { cwd: root, env });
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^docker@a +input +0 /m);
    expect(table.stdout).toMatch(/^docker@b +input +0 /m);
  });

  it('an engine that does not answer is its own column marked error, not scheduled onto the other engine', async () => {
    const { root, capRoot } = await tempProject('capsule-compare-engines-');
    await writeCapability(
      capRoot,
      'one-gone',
      { environment: 'docker', docker: { image: 'capsule/busybox:1' } },
      { 'run.sh': 'echo ok\n' },
    );
    const env = {
      ...process.env,
      XDG_STATE_HOME: path.join(root, '.state'),
      CAPSULE_ENGINES: JSON.stringify({
        a: { type: 'docker', host: hosts['pool-a'] },
        gone: { type: 'docker', host: `unix://${root}/no-engine.sock` },
      }),
    };
    const since = Math.floor(Date.now() / 1000) - 1;
    const withGrant = await cli(
      [
        'compare',
        'one-gone',
        '--env',
        'docker',
        '--engine',
        'a,gone',
        '--runs',
        '1',
        '--json',
        '--grant',
        'run_capability:one-gone',
      ],
      { cwd: root, env },
    );
    expect(withGrant.code, withGrant.stderr).toBe(69);
    const report = JSON.parse(withGrant.stdout) as CompareReport;
    expect(report.environments.map((e) => [e.engine, e.status])).toEqual([
      ['a', 'ok'],
      ['gone', 'error'],
    ]);
    expect(report.environments[1]?.reason).toMatch(/engine gone/);
    // Exactly one call reached pool-a: the column of `gone` was not run there instead.
    expect(await created(hosts['pool-a'] as string, 'one-gone', since)).toBe(1);
  });
});
