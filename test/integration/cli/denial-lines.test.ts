import { existsSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { BUILT_CLI } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';

/** A line as a person pastes it: bash, with `capsule` the built CLI. */
async function paste(line: string, cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const r = await execa(
    'bash',
    ['-c', `shopt -s expand_aliases\nalias capsule="node ${BUILT_CLI}"\n${line}`],
    {
      cwd,
      reject: false,
      stdin: 'ignore',
    },
  );
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

describe('a denial is two lines, and the second one allows exactly the denied key', () => {
  it('exec of a compound command: the pasted line runs it, and only it', async () => {
    const { root } = await tempProject('capsule-denial-');
    const denied = await paste(`capsule exec --no-prompt -- 'true && touch made'`, root);
    expect(denied.code).toBe(77);
    const lines = denied.stderr.trimEnd().split('\n');
    expect(lines.length, denied.stderr).toBeLessThanOrEqual(2);
    expect(lines[0]).toMatch(/^capsule: denied run_command:true && touch made \(by /);
    const allow = /^allow it: (capsule .*)$/.exec(lines[1] ?? '')?.[1];
    expect(allow, lines[1]).toBeDefined();
    expect(existsSync(path.join(root, 'made'))).toBe(false);
    const ran = await paste(allow as string, root);
    expect(ran.code, ran.stderr).toBe(0);
    expect(existsSync(path.join(root, 'made'))).toBe(true);
    // Exactly that key: the same grant does not cover another compound command.
    const other = await paste(`${(allow as string).replace(/ -- .*$/, '')} -- 'true && touch other'`, root);
    expect(other.code).toBe(77);
    expect(existsSync(path.join(root, 'other'))).toBe(false);
  });

  it('run of a shell capability: two lines (the isolation paragraph only under --verbose)', async () => {
    const { root, capRoot } = await tempProject('capsule-denial-');
    await writeCapability(capRoot, 'mark', {}, { 'run.sh': 'echo ran\n' });
    await writeCapability(capRoot, 'other', {}, { 'run.sh': 'echo other\n' });
    const denied = await paste(`capsule run mark --no-prompt`, root);
    expect(denied.code).toBe(77);
    const lines = denied.stderr.trimEnd().split('\n');
    expect(lines.length, denied.stderr).toBeLessThanOrEqual(2);
    expect(denied.stderr).not.toMatch(/namespaces/);
    const allow = /^allow it: (capsule .*)$/.exec(lines[1] ?? '')?.[1] as string;
    const ran = await paste(allow, root);
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toBe('ran');
    // The grant it adds is run_capability:mark and nothing else.
    const widened = await paste(allow.replace('capsule run mark', 'capsule run other'), root);
    expect(widened.code).toBe(77);
    const verbose = await paste(`capsule run mark --no-prompt --verbose`, root);
    expect(verbose.stderr).toMatch(/not sandboxed/);
    const asJson = await paste(`capsule run mark --no-prompt --json`, root);
    expect(JSON.parse(asJson.stdout)).toMatchObject({
      error: { code: 'PERMISSION_DENIED', key: 'run_capability:mark', denial: { by: 'nobody' } },
    });
  });

  it('ci: one summary of denials, whose flags allow exactly the denied keys', async () => {
    const { root, capRoot } = await tempProject('capsule-denial-');
    const cases = JSON.stringify({
      schemaVersion: 1,
      cases: [
        { name: 'a', input: {}, expect: { exitCode: 0, json: {} } },
        { name: 'b', input: {}, expect: { exitCode: 0, json: {} } },
      ],
    });
    await writeCapability(capRoot, 'one', {}, { 'run.sh': 'echo {}\n', 'cases.json': cases });
    await writeCapability(capRoot, 'two', {}, { 'run.sh': 'echo {}\n', 'cases.json': cases });
    const denied = await paste('capsule ci', root);
    expect(denied.code, denied.stdout + denied.stderr).toBe(77);
    expect(denied.stdout).toMatch(
      /^4 cases denied: run_capability:one, run_capability:two — grant with --grant KEY/m,
    );
    expect(denied.stdout.match(/Permission denied/g)).toBeNull();
    const flags = /^ {2}to allow them: (.*)$/m.exec(denied.stdout)?.[1] as string;
    expect(flags).toBe('--grant run_capability:one --grant run_capability:two');
    const ran = await paste(`capsule ci ${flags}`, root);
    expect(ran.code, ran.stdout + ran.stderr).toBe(0);
  });
});
