import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { cli } from '../../helpers/cli.js';

// `capsule run --json`: a denial names what stopped it, per source, and nothing runs.

async function setup(config: Record<string, unknown>) {
  const { root, capRoot } = await tempProject('capsule-denial-');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1, ...config }));
  await writeCapability(capRoot, 'mark', {}, { 'run.sh': `touch "${root}/ran"\n` });
  const run = async (...flags: string[]) => {
    const r = await cli(['run', 'mark', '--json', '--no-prompt', ...flags], {
      cwd: root,
      env: { ...process.env, CAPSULE_STATE_DIR: path.join(root, '.state') },
    });
    return {
      code: r.code,
      error: (JSON.parse(r.stdout) as { error?: { denial?: Record<string, unknown> } }).error,
    };
  };
  return { root, run };
}

describe('capsule run --json: error.denial', () => {
  it('rule, mode, ceiling and nobody, each by its source; the capability never runs', async () => {
    const rule = await setup({ permissions: { deny: ['run_capability(mark)'] } });
    expect(await rule.run()).toMatchObject({
      code: 77,
      error: { denial: { by: 'rule', matched: 'run_capability(mark)' } },
    });
    const mode = await setup({});
    expect(await mode.run('--mode', 'plan')).toMatchObject({ code: 77, error: { denial: { by: 'mode' } } });
    // A project file's allow rule cannot reach a shell capability: the ceiling, with no person to ask.
    const ceiling = await setup({ permissions: { allow: ['run_capability(mark)'] } });
    expect(await ceiling.run()).toMatchObject({
      code: 77,
      error: { denial: { by: 'ceiling', source: 'no-prompt' } },
    });
    const nobody = await setup({});
    expect(await nobody.run()).toMatchObject({
      code: 77,
      error: { denial: { by: 'nobody', ceiling: 'session' } },
    });
    for (const p of [rule, mode, ceiling, nobody]) expect(existsSync(path.join(p.root, 'ran'))).toBe(false);
  });
});
