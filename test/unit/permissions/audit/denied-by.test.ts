import { mkdtemp, readFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { userStateDir } from '../../../../src/base/user-state.js';
import { JsonlAuditLog } from '../../../../src/permissions/audit/writer.js';
import { auditHeadPath, auditLogPath } from '../../../../src/project/audit-paths.js';
import { StateKey } from '../../../../src/project/state-key.js';
import { PermissionEngine } from '../../../../src/permissions/engine.js';
import { openProjectAuditLog } from '../../../../src/runtime/audit.js';
import {
  createNonInteractivePrompter,
  createScriptedPrompter,
} from '../../../../src/permissions/prompter.js';
import type { Prompter } from '../../../../src/permissions/prompter.js';
import { cli } from '../../../helpers/cli.js';
import { capabilityRequest, fakeClock, tempProject, toolReq } from '../helpers.js';

/**
 * The audit log says who denied (`denied_by`, the same mapping as the denial a caller gets), inside the
 * hash chain; `capsule audit verify` still passes, for new lines and for lines written before the field.
 */
async function setup(config: unknown) {
  const { root } = await tempProject(config);
  const state = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
  const env = { ...process.env, XDG_STATE_HOME: state, CAPSULE_STATE_DIR: undefined };
  const stateDir = userStateDir(env, homedir());
  const engine = async (prompter: Prompter, mode?: 'plan') =>
    // A fresh log object per engine, as each process opens its own (runtime/audit.ts).
    PermissionEngine.create({
      projectRoot: root,
      prompter,
      mode,
      audit: await openProjectAuditLog({ projectRoot: root, stateDir }),
    });
  const records = async () =>
    (await readFile(auditLogPath(root), 'utf8'))
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const verify = async () => (await cli(['audit', 'verify', '--json'], { cwd: root, env })).code;
  return { root, stateDir, engine, records, verify };
}

const base = { schemaVersion: 1 };

describe('the audit log records who denied', () => {
  it('rule, mode, ceiling, person and nobody each appear with their denied_by; verify passes', async () => {
    const s = await setup({
      ...base,
      permissions: { deny: ['run_capability(ruled)'], allow: ['run_capability(hostly)'] },
    });
    const cases: [Prompter, 'plan' | undefined, Parameters<typeof capabilityRequest>, string][] = [
      [createScriptedPrompter(['Once']), undefined, ['ruled', { sandboxed: true }], 'rule'],
      [createScriptedPrompter(['Once']), 'plan', ['planned', { sandboxed: true }], 'mode'],
      [createNonInteractivePrompter(), undefined, ['hostly', { sandboxed: false }], 'ceiling'],
      [createScriptedPrompter(['Deny']), undefined, ['refused', { sandboxed: true }], 'person'],
      [createNonInteractivePrompter(), undefined, ['unasked', { sandboxed: true }], 'nobody'],
    ];
    for (const [prompter, mode, request, by] of cases) {
      const e = await s.engine(prompter, mode);
      const d = await e.check(capabilityRequest(...request));
      expect(d.outcome, by).toBe('deny');
      // The log and the denial the caller got agree.
      expect(d.denial?.by).toBe(by);
      const last = (await s.records()).at(-1);
      expect(last, by).toMatchObject({
        decision: 'deny',
        denied_by: by,
        key: `run_capability:${request[0]}`,
      });
    }
    // A write to capsule's own files: a rule, too.
    const e = await s.engine(createScriptedPrompter(['AlwaysThisSession']));
    await e.check(toolReq('write_file', 'FILE_EDIT', `${s.root}/capsule.json`));
    expect((await s.records()).at(-1)).toMatchObject({ source: 'self-protection', denied_by: 'rule' });
    expect(await s.verify()).toBe(0);
  });

  it('an allowed call has no denied_by; the field sits beside source, inside the hashed bytes', async () => {
    const s = await setup(base);
    const e = await s.engine(createScriptedPrompter(['Once']));
    await e.check(capabilityRequest('fine', { sandboxed: true }));
    const e2 = await s.engine(createNonInteractivePrompter());
    await e2.check(capabilityRequest('unasked', { sandboxed: true }));
    const text = await readFile(auditLogPath(s.root), 'utf8');
    const [allowed, denied] = text.trimEnd().split('\n');
    expect(allowed).not.toContain('denied_by');
    expect(denied).toMatch(/"source":"no-prompt","denied_by":"nobody","reason"/);
    expect(await s.verify()).toBe(0);
    // Editing who denied breaks the chain: it is hashed.
    const { writeFile } = await import('node:fs/promises');
    await writeFile(auditLogPath(s.root), text.replace('"denied_by":"nobody"', '"denied_by":"person"'));
    expect(await s.verify()).not.toBe(0);
  });

  it('a log written before the field (a deny line without denied_by) still verifies', async () => {
    const s = await setup(base);
    const old = new JsonlAuditLog(auditLogPath(s.root), fakeClock(), {
      head: { file: await auditHeadPath(s.stateDir, s.root), key: new StateKey({ stateDir: s.stateDir }) },
      projectRoot: s.root,
    });
    await old.append({
      tool: 'run_capability',
      key: 'run_capability:legacy',
      decision: 'deny',
      source: 'no-prompt',
      reason: 'denied before denied_by existed',
      mode: 'default',
    });
    const e = await s.engine(createNonInteractivePrompter());
    await e.check(capabilityRequest('later', { sandboxed: true }));
    const [legacy, later] = await s.records();
    expect(legacy).not.toHaveProperty('denied_by');
    expect(later).toMatchObject({ denied_by: 'nobody' });
    expect(await s.verify()).toBe(0);
  });
});
