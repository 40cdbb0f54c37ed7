import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { openAgentSession } from '../../../src/agent/open-session.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import { tempProject } from '../../helpers/capability.js';
import { cli } from '../../helpers/cli.js';

/**
 * A command run through the gate (capsule exec, the agent's run_command) must not see capsule's own
 * secrets: neither in its environment nor through /proc. Judged by the command's own output.
 */
const SECRET = 'capsule-test-secret-7f3a9c';
const READ_EVERYTHING =
  'env; cat /proc/self/environ; cat /proc/$PPID/environ; for f in /proc/[0-9]*/environ; do cat "$f"; done; true';

async function project(): Promise<string> {
  const { root } = await tempProject('capsule-secrets-');
  await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}');
  return root;
}

describe('a command cannot read capsule’s secrets', () => {
  it('capsule exec: not in env, not through /proc', async () => {
    const root = await project();
    const key = `run_command:${READ_EVERYTHING}`;
    const r = await cli(['exec', '--json', '--grant', key, '--no-prompt', '--', READ_EVERYTHING], {
      cwd: root,
      env: { ...process.env, CAPSULE_API_KEY: SECRET },
    });
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as { stdout: string };
    // The command ran and printed an environment (PATH is passed so commands are found).
    expect(out.stdout).toMatch(/PATH=/);
    expect(out.stdout).not.toContain(SECRET);
  });

  it('the agent’s run_command: not in env, not through /proc', async () => {
    const root = await project();
    const previous = process.env.CAPSULE_API_KEY;
    process.env.CAPSULE_API_KEY = SECRET;
    try {
      const s = await openAgentSession({
        cwd: root,
        env: { ...process.env },
        grants: [`run_command:${READ_EVERYTHING}`],
        runners: [new ShellRunner()],
        stateDir: false,
        logger: () => undefined,
      });
      try {
        const r = (await s.call('run_command', { command: READ_EVERYTHING })) as { stdout: string };
        expect(r.stdout).toMatch(/PATH=/);
        expect(r.stdout).not.toContain(SECRET);
      } finally {
        await s.close();
      }
    } finally {
      if (previous === undefined) delete process.env.CAPSULE_API_KEY;
      else process.env.CAPSULE_API_KEY = previous;
    }
  });
});
