import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parse, type DefaultTreeAdapterMap } from 'parse5';
import { describe, expect, it } from 'vitest';
import type { CompareReport } from '../../../src/compare/compare.js';
import { cli } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';

type Element = DefaultTreeAdapterMap['element'];
function elements(node: DefaultTreeAdapterMap['node'], out: Element[] = []): Element[] {
  if ('tagName' in node) out.push(node);
  for (const child of 'childNodes' in node ? node.childNodes : []) elements(child, out);
  return out;
}
const attr = (e: Element, name: string): string | undefined => e.attrs.find((a) => a.name === name)?.value;

describe('capsule compare', () => {
  it('runs a JavaScript capability as node on the host, a component in wasm and node in docker; outputs agree', async () => {
    const { root } = await tempProject();
    const html = path.join(root, 'report.html');
    const r = await cli([
      'compare',
      'hello',
      '--grant',
      'run_capability:hello',
      '--input',
      '{"name":"compare"}',
      '--runs',
      '2',
      '--sequential',
      '--json',
      '--html',
      html,
    ]);
    expect(r.stderr).toBe('');
    const report = JSON.parse(r.stdout) as CompareReport;
    expect(r.code).toBe(0);
    expect(report.environments.map((e) => [e.environment, e.status])).toEqual([
      ['shell', 'ok'],
      ['wasm', 'ok'],
      ['docker', 'ok'],
    ]);
    for (const env of report.environments) {
      expect(env.runs[0]?.stdout).toBe('Hello, compare!\n');
      expect(env.runs[0]?.durationsMs).toHaveLength(2);
    }
    expect(report.environments.map((e) => e.isolation?.sandboxed)).toEqual([false, true, true]);
    expect(report.equal).toBe(true);

    const page = elements(parse(await readFile(html, 'utf8')));
    expect(page.some((e) => e.tagName === 'script' || e.tagName === 'link')).toBe(false);
    const bars = page.filter((e) => e.tagName === 'rect' && attr(e, 'class') === 'bar');
    expect(bars.map((b) => attr(b, 'data-env'))).toEqual(['shell', 'wasm', 'docker']);
    for (const [i, env] of report.environments.entries()) {
      expect(Number(attr(bars[i] as Element, 'data-median'))).toBeCloseTo(env.runs[0]?.medianMs ?? -1, 2);
    }
    expect(attr(page.find((e) => attr(e, 'id') === 'verdict') as Element, 'class')).toBe('equal');
  });

  it('shows a readable diff and exits 1 when environments disagree', async () => {
    const { root, capRoot } = await tempProject();
    // `uname -s` differs nowhere here, but the host's hostname differs from a container's.
    await writeCapability(capRoot, 'where', {}, { 'run.sh': 'echo start; hostname; echo end\n' });
    const r = await cli(
      ['compare', 'where', '--env', 'shell,docker', '--grant', 'run_capability:where', '--runs', '1'],
      { cwd: root },
    );
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^--- shell \/ input \(exit 0\)$/m);
    expect(r.stdout).toMatch(/^\+\+\+ docker \/ input \(exit 0\)$/m);
    expect(r.stdout).toMatch(/^ {2}start$/m);
    expect(r.stdout).toContain('outputs: DIFFER');
  });

  it('reports environments a capability is not portable to, and runs the rest (exit 69)', async () => {
    const r = await cli([
      'compare',
      'word-count',
      '--grant',
      'run_capability:word-count',
      '--input',
      '{"text":"a b"}',
      '--runs',
      '1',
      '--json',
    ]);
    expect(r.code).toBe(69);
    const report = JSON.parse(r.stdout) as CompareReport;
    const byEnv = Object.fromEntries(report.environments.map((e) => [e.environment, e]));
    expect(byEnv.shell?.status).toBe('ok');
    expect(byEnv.docker?.status).toBe('ok');
    expect(byEnv.docker?.runs[0]?.stdout).toBe(byEnv.shell?.runs[0]?.stdout);
    expect(byEnv.wasm?.status).toBe('not-portable');
    expect(byEnv.wasm?.reason).toMatch(/JavaScript module/);
  });

  it('reports an unavailable Docker engine and still runs the others', async () => {
    const { root } = await tempProject();
    const env = { ...process.env, DOCKER_HOST: `unix://${path.join(root, 'no-engine.sock')}` };
    const r = await cli(
      [
        'compare',
        'hello',
        '--grant',
        'run_capability:hello',
        '--input',
        '{"name":"x"}',
        '--runs',
        '1',
        '--json',
      ],
      { env },
    );
    expect(r.code).toBe(69);
    const report = JSON.parse(r.stdout) as CompareReport;
    expect(report.environments.map((e) => e.status)).toEqual(['ok', 'ok', 'unavailable']);
    expect(report.environments[2]?.reason).toMatch(/no-engine\.sock/);
  });

  it('refuses to overwrite an existing HTML report without --force, and asks permission first', async () => {
    const { root } = await tempProject();
    const html = path.join(root, 'r.html');
    await writeFile(html, 'keep me');
    const refused = await cli([
      'compare',
      'hello',
      '--grant',
      'run_capability:hello',
      '--input',
      '{"name":"x"}',
      '--html',
      html,
    ]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('--force');
    expect(await readFile(html, 'utf8')).toBe('keep me');
    const denied = await cli(['compare', 'hello', '--input', '{"name":"x"}', '--env', 'wasm']);
    expect(denied.code).toBe(77);
  });

  it('rejects bad flags clearly', async () => {
    expect((await cli(['compare', 'hello', '--env', 'shell,vm'])).stderr).toMatch(/unknown environment vm/);
    expect((await cli(['compare', 'hello', '--runs', '0'])).code).toBe(64);
    expect(
      (await cli(['compare', 'hello', '--grant', 'run_capability:hello', '--input', '{"nom":1}'])).code,
    ).toBe(65);
  });
});
