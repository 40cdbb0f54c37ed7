import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { JsonlAuditLog } from '../../../src/permissions/audit/writer.js';
import type { AuditEvent, AuditSink } from '../../../src/permissions/audit/record.js';
import { auditLogPath } from '../../../src/project/audit-paths.js';
import { projectConfigSchema } from '../../../src/project/project-config.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { createNonInteractivePrompter } from '../../../src/permissions/prompter.js';
import { SessionAllowlist } from '../../../src/permissions/session-allowlist.js';
import { agentFixture } from '../../helpers/agent-fixture.js';
import { capabilityRequest, fakeClock, tempProject } from './helpers.js';

/** An audit sink that takes its time, as a log behind a contended lock does. */
class SlowSink implements AuditSink {
  readonly events: AuditEvent[] = [];
  constructor(private readonly onAppend: () => void = () => undefined) {}
  async append(event: AuditEvent): Promise<void> {
    this.onAppend();
    await new Promise((resolve) => setTimeout(resolve, 5));
    this.events.push(event);
  }
}

async function engineWith(audit: AuditSink, clock = fakeClock()): Promise<PermissionEngine> {
  const { root } = await tempProject();
  return PermissionEngine.create({
    projectRoot: root,
    config: projectConfigSchema.parse({}),
    prompter: createNonInteractivePrompter(),
    audit,
    clock,
  });
}

describe('use counts and TTLs under concurrency', () => {
  it('a grant with uses: 1 lets exactly one of many concurrent checks through (real audit log)', async () => {
    const { root } = await tempProject();
    const e = await PermissionEngine.create({
      projectRoot: root,
      config: projectConfigSchema.parse({}),
      prompter: createNonInteractivePrompter(),
      audit: new JsonlAuditLog(auditLogPath(root), fakeClock()),
    });
    e.grantSession('run_capability:w', { uses: 1 });
    const req = capabilityRequest('w', { sandboxed: false });
    const outcomes = await Promise.all(Array.from({ length: 20 }, () => e.check(req)));
    expect(outcomes.filter((d) => d.outcome === 'allow')).toHaveLength(1);
    expect(e.session.list()).toHaveLength(0);
  });

  it('uses: 3 with a slow audit sink: exactly three allowed out of twenty', async () => {
    const e = await engineWith(new SlowSink());
    e.grantSession('run_capability:w', { uses: 3 });
    const req = capabilityRequest('w', { sandboxed: false });
    const outcomes = await Promise.all(Array.from({ length: 20 }, () => e.check(req)));
    expect(outcomes.filter((d) => d.outcome === 'allow')).toHaveLength(3);
  });

  it('a wildcard grant with a use count is shared by every key it covers', async () => {
    const e = await engineWith(new SlowSink());
    e.grantSession('run_capability:*', { uses: 2 });
    const outcomes = await Promise.all(
      Array.from({ length: 10 }, (_, i) => e.check(capabilityRequest(`w${i}`, { sandboxed: false }))),
    );
    expect(outcomes.filter((d) => d.outcome === 'allow')).toHaveLength(2);
  });

  it('a TTL that runs out while an earlier decision is being recorded denies every later check', async () => {
    const clock = fakeClock();
    // Each append moves time on by 40 s: the grant (60 s) runs out during the second record.
    const e = await engineWith(new SlowSink(() => clock.advance(40_000)), clock);
    e.grantSession('run_capability:w', { ttlMs: 60_000 });
    const req = capabilityRequest('w', { sandboxed: false });
    const first = e.check(req);
    const second = e.check(req);
    expect((await first).outcome).toBe('allow');
    expect((await second).outcome).toBe('allow');
    // Both were decided at t0 (inside the TTL); time is now t0+80 s: nothing more is allowed.
    const later = await Promise.all(Array.from({ length: 5 }, () => e.check(req)));
    expect(later.map((d) => d.outcome)).toEqual(['deny', 'deny', 'deny', 'deny', 'deny']);
  });

  it('N concurrent run_command calls under a one-use grant run at most one command (markers)', async () => {
    const f = await agentFixture();
    f.session.gate.session.add('run_command:touch', { uses: 1, origin: '--grant' });
    const n = 12;
    const results = await Promise.allSettled(
      Array.from({ length: n }, (_, i) => f.session.call('run_command', { command: `touch marker-${i}` })),
    );
    const markers = (await readdir(f.root)).filter((name) => name.startsWith('marker-'));
    expect(markers.length).toBeLessThanOrEqual(1);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(markers.length);
    expect(existsSync(path.join(f.root, 'marker-1')) && existsSync(path.join(f.root, 'marker-2'))).toBe(
      false,
    );
  });
});

describe('SessionAllowlist.reserve', () => {
  it('takes a use at once and refuses an exhausted or expired entry', () => {
    const clock = fakeClock();
    const list = new SessionAllowlist(clock);
    const entry = list.add('run_capability:w', { uses: 1, ttlMs: 1000 });
    expect(list.reserve(entry)).toBe(true);
    expect(list.reserve(entry)).toBe(false);
    const timed = list.add('run_capability:t', { ttlMs: 1000 });
    clock.advance(1000);
    expect(list.reserve(timed)).toBe(false);
  });
});

describe('SessionAllowlist: bad grant options', () => {
  it('a ttlMs or uses that is not positive is a USAGE error naming the key, and grants nothing', () => {
    const list = new SessionAllowlist({ now: () => 0 });
    for (const options of [{ ttlMs: 0 }, { uses: 0 }, { uses: 1.5 }]) {
      let caught: unknown;
      try {
        list.add('run_capability:x', options);
      } catch (err) {
        caught = err;
      }
      expect(caught).toMatchObject({ code: 'USAGE', details: { key: 'run_capability:x' } });
    }
    expect(list.list()).toEqual([]);
  });
});
