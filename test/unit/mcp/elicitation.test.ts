import { describe, expect, it } from 'vitest';
import { elicitationChoices, replyOfElicitation } from '../../../src/mcp/elicitation.js';
import type { AskAnswer } from '../../../src/permissions/types.js';

const HOST: AskAnswer[] = ['Once', 'AlwaysThisSession', 'Deny', 'DenyThisSession', 'DenyAlways'];
const SANDBOXED: AskAnswer[] = [
  'Once',
  'AlwaysThisSession',
  'AlwaysThisProject',
  'AllowPattern',
  'Deny',
  'DenyThisSession',
  'DenyAlways',
];

describe('elicitation choices and answers', () => {
  it('lifetimes beside a session grant; no pattern over a form; nothing beyond the options', () => {
    expect(elicitationChoices(HOST)).toEqual([
      'Once',
      'Uses',
      'Duration',
      'AlwaysThisSession',
      'Deny',
      'DenyThisSession',
      'DenyAlways',
    ]);
    expect(elicitationChoices(SANDBOXED)).not.toContain('AllowPattern');
    // What may break a deny rule is offered once or deny: no lifetime.
    expect(elicitationChoices(['Once', 'Deny', 'DenyThisSession'])).toEqual([
      'Once',
      'Deny',
      'DenyThisSession',
    ]);
  });

  it('a lifetime needs a valid whole number; anything else is a denial', () => {
    expect(replyOfElicitation({ decision: 'Uses', uses: 3 }, HOST)).toEqual({
      answer: 'AlwaysThisSession',
      lifetime: { uses: 3 },
    });
    expect(replyOfElicitation({ decision: 'Uses', uses: 1 }, HOST)).toBe('Once');
    expect(replyOfElicitation({ decision: 'Duration', minutes: 10 }, HOST)).toEqual({
      answer: 'AlwaysThisSession',
      lifetime: { ttlMs: 600_000 },
    });
    for (const content of [
      { decision: 'Uses' },
      { decision: 'Uses', uses: 2.5 },
      { decision: 'Uses', uses: '3' },
      { decision: 'Uses', uses: 1001 },
      { decision: 'Duration', minutes: 0 },
      { decision: 'Duration', minutes: 43_201 },
      { decision: 'AlwaysThisProject' },
      { decision: 'AllowPattern' },
    ])
      expect(replyOfElicitation(content, HOST), JSON.stringify(content)).toBe('Deny');
    // A lifetime is not offered where a session grant is not (unproven: once or deny only).
    expect(replyOfElicitation({ decision: 'Uses', uses: 3 }, ['Once', 'Deny'])).toBe('Deny');
    expect(replyOfElicitation(undefined, HOST)).toBe('Deny');
  });
});
