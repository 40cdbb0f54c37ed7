import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { BUILT_CLI, builtCli, cli, REPO_ROOT } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { inTerminal } from '../../helpers/terminal.js';

beforeAll(async () => {
  if (!existsSync(BUILT_CLI)) await execa('npm', ['run', 'build', '--silent'], { cwd: REPO_ROOT });
}, 300_000);

async function project(): Promise<{ root: string; capRoot: string; file: string }> {
  const p = await tempProject('capsule-always-');
  const file = path.join(p.root, 'capsule.json');
  await writeFile(file, JSON.stringify({ schemaVersion: 1 }, null, 2));
  return { ...p, file };
}

/** A wasm capability (sandboxed: a project-level grant is possible). */
async function wasmCapability(capRoot: string, name: string): Promise<void> {
  await writeCapability(capRoot, name, {
    environment: 'wasm',
    entry: `${name}.wasm`,
    interpreter: undefined,
  });
  await writeFile(path.join(capRoot, name, `${name}.wasm`), Buffer.from('\0asm\x01\0\0\0', 'latin1'));
}

async function permissionsOf(file: string): Promise<{ allow?: string[]; deny?: string[] }> {
  return (JSON.parse(await readFile(file, 'utf8')) as { permissions?: object }).permissions ?? {};
}

const PROMPTED = '(default: deny)';

describe('"always deny" at the terminal prompt', () => {
  it('is saved as deny rules: a later run in a new process is denied without asking, even with a grant', async () => {
    const { root, file } = await project();
    const first = await inTerminal(root, ['exec', '--', 'touch V'], 'x\n');
    expect(first.output).toContain('[x] always deny');
    expect(first.output).toContain('saving the deny rule(s) run_command(touch), run_command(touch *)');
    expect(first.code).toBe(77);
    expect(existsSync(path.join(root, 'V'))).toBe(false);
    expect(await permissionsOf(file)).toMatchObject({ deny: ['run_command(touch)', 'run_command(touch *)'] });

    // A new process, at a terminal: denied by the rule, no question asked.
    const again = await inTerminal(root, ['exec', '--', 'touch V'], 'o\n');
    expect(again.output).not.toContain(PROMPTED);
    expect(again.code).toBe(77);
    // A session grant does not lift a deny rule; nor does a wrapper.
    for (const command of ['touch V', 'env touch V', 'sh -c "touch V"']) {
      const granted = await builtCli(['exec', '--grant', 'run_command:*', '--no-prompt', '--', command], {
        cwd: root,
      });
      expect(granted.code, command).toBe(77);
    }
    expect(existsSync(path.join(root, 'V'))).toBe(false);
  });

  it('control: a plain "deny" saves nothing, and the same grant then creates the file', async () => {
    const { root, file } = await project();
    const first = await inTerminal(root, ['exec', '--', 'touch V'], 'd\n');
    expect(first.code).toBe(77);
    expect(await permissionsOf(file)).toEqual({});
    const granted = await builtCli(['exec', '--grant', 'run_command:touch', '--no-prompt', '--', 'touch V'], {
      cwd: root,
    });
    expect(granted.code).toBe(0);
    expect(existsSync(path.join(root, 'V'))).toBe(true);
  });

  it('a host tool offers no "always" allow, and the prompt says why', async () => {
    const { root } = await project();
    const r = await inTerminal(root, ['exec', '--', 'touch W'], 'd\n');
    expect(r.output).toContain('[o] once  [s] this session  [d] deny');
    expect(r.output).not.toContain('[p]');
    expect(r.output).not.toContain('[r]');
    expect(r.output).toContain('a host tool is never allowed "always"');
  });
});

describe('"always allow a pattern" at the terminal prompt', () => {
  it('shows the rule, saves it once confirmed: a matching sandboxed call runs unasked, another still asks', async () => {
    const { root, capRoot, file } = await project();
    for (const name of ['w1', 'w2', 'x1']) await wasmCapability(capRoot, name);
    const first = await inTerminal(root, ['run', 'w1'], 'r\nrun_capability(w*)\ny\n');
    expect(first.output).toContain('[r] always allow a pattern');
    expect(first.output).toContain('Enter keeps run_capability(w1)');
    expect(first.output).toContain('save the allow rule run_capability(w*) in capsule.json?');
    expect(await permissionsOf(file)).toMatchObject({ allow: ['run_capability(w*)'] });

    const matching = await inTerminal(root, ['run', 'w2'], 'd\n');
    expect(matching.output).not.toContain(PROMPTED);
    expect(matching.code).not.toBe(77);
    const explained = await cli(['explain', '--capability', 'w2', '--json'], { cwd: root });
    expect(JSON.parse(explained.stdout)).toMatchObject({ outcome: 'allow', source: 'allow-rule' });

    const other = await inTerminal(root, ['run', 'x1'], 'd\n');
    expect(other.output).toContain(PROMPTED);
    expect(other.code).toBe(77);
  });

  it('a rule that does not fit the call is refused and asked again; no "y" saves nothing and denies', async () => {
    const { root, capRoot, file } = await project();
    await wasmCapability(capRoot, 'w1');
    const r = await inTerminal(root, ['run', 'w1'], 'r\nrun_capability(z*)\nrun_command(*)\n\nn\n');
    expect(r.output).toContain('does not match this call');
    expect(r.output).toContain('is for run_command, not for run_capability');
    expect(r.output).toContain('save the allow rule run_capability(w1) in capsule.json?');
    expect(r.output).toContain('not saved: denied');
    expect(r.code).toBe(77);
    expect(await permissionsOf(file)).toEqual({});
  });
});
