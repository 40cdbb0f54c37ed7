import { describe, expect, it } from 'vitest';
import { MemoryAuditSink } from '../../../src/permissions/audit/memory-sink.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { lifetimeText, parseLifetime, parseLimitedGrant } from '../../../src/permissions/grant-lifetime.js';
import { createNonInteractivePrompter } from '../../../src/permissions/prompter.js';
import { capabilityRequest, fakeClock, HASH_A, tempProject } from './helpers.js';

describe('session grants with a lifetime', () => {
  it('parses once, uses, a time and both; refuses anything else, naming the flag', () => {
    expect(parseLimitedGrant('once=run_capability:hello')).toEqual({ key: 'run_capability:hello', uses: 1 });
    expect(parseLimitedGrant('3x,10m=run_command:env A=1 make')).toEqual({
      key: 'run_command:env A=1 make',
      uses: 3,
      ttlMs: 600_000,
    });
    expect(parseLifetime('90s')).toEqual({ ttlMs: 90_000 });
    expect(lifetimeText({ uses: 3, ttlMs: 600_000 })).toBe('3 uses, for 10 minutes');
    for (const bad of [
      'run_capability:hello',
      '=k:x',
      'twice=k:x',
      '0x=k:x',
      '3x,4x=k:x',
      '31d=k:x',
      'once=',
    ])
      expect(() => parseLimitedGrant(bad), bad).toThrow(expect.objectContaining({ code: 'USAGE' }) as Error);
  });

  it('a once grant allows the first call and denies the second; a timed one ends with its time', async () => {
    const { root } = await tempProject();
    const clock = fakeClock();
    const e = await PermissionEngine.create({
      projectRoot: root,
      prompter: createNonInteractivePrompter(),
      clock,
      audit: new MemoryAuditSink(),
      limitedGrants: [
        { key: 'run_capability:hello', uses: 1 },
        { key: 'run_capability:timed', ttlMs: 60_000 },
      ],
    });
    const hello = capabilityRequest('hello', { sandboxed: true, hash: HASH_A });
    const [first, second] = await Promise.all([e.check(hello), e.check(hello)]);
    expect([first.outcome, second.outcome].sort()).toEqual(['allow', 'deny']);
    expect((await e.check(hello)).outcome).toBe('deny');
    const timed = capabilityRequest('timed', { sandboxed: true, hash: HASH_A });
    expect((await e.check(timed)).outcome).toBe('allow');
    expect((await e.check(timed)).outcome).toBe('allow');
    clock.advance(60_000);
    expect((await e.check(timed)).outcome).toBe('deny');
  });
});
