import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject } from '../../helpers/capability.js';

describe('capsule exec --grant-for LIFETIME=KEY', () => {
  it('a once grant runs the command (marker made); a bad lifetime is exit 64 before anything runs', async () => {
    const { root } = await tempProject('capsule-grant-for-');
    await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}');
    const ok = await cli(['exec', '--grant-for', 'once=run_command:touch', '--no-prompt', '--', 'touch m1'], {
      cwd: root,
    });
    expect(ok.code, ok.stderr).toBe(0);
    expect(existsSync(path.join(root, 'm1'))).toBe(true);
    const bad = await cli(
      ['exec', '--grant-for', 'twice=run_command:touch', '--no-prompt', '--', 'touch m2'],
      {
        cwd: root,
      },
    );
    expect(bad.code).toBe(64);
    expect(bad.stderr).toContain('--grant-for');
    expect(existsSync(path.join(root, 'm2'))).toBe(false);
  });
});
