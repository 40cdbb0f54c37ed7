import { describe, expect, it } from 'vitest';
import { classify, type LearnPlace } from '../../../src/learn/classify.js';
import type { Observation } from '../../../src/runners/types.js';

const place: LearnPlace = {
  projectRoot: '/p',
  ownDirs: ['/p/capabilities/me', '/stage/abc'],
  capabilityRoots: ['/p/capabilities'],
  protectedPaths: ['/p/capsule.json', '/p/.capsule', '/home/u/.cache/capsule'],
  home: '/home/u',
  tmp: '/tmp',
};
const seen = (op: Observation['op'], p: string, outcome: Observation['outcome'] = 'ok'): Observation => ({
  op,
  path: p,
  outcome,
  via: 'tracer',
});

describe('classify', () => {
  it('proposes the narrowest folders, rw only where written, one grant where one covers another', () => {
    const out = classify(
      [
        seen('read', '/p/data/a/x'),
        seen('read', '/p/data/a/y'),
        seen('read', '/p/data/a/deep/z'),
        seen('create', '/p/out/r'),
        seen('read', '/p/out/sub/q'),
      ],
      place,
    );
    expect(out.grants.fs).toEqual([
      { path: 'data/a', mode: 'ro' },
      { path: 'out', mode: 'rw' },
    ]);
  });

  it('never proposes capsule state, capability folders, failed calls or anything outside', () => {
    const out = classify(
      [
        seen('read', '/p/capsule.json'),
        seen('write', '/p/.capsule/audit.jsonl'),
        seen('read', '/p/capabilities/other/secret'),
        seen('read', '/p/data/missing', 'failed'),
        seen('read', '/home/u/.ssh/id_rsa'),
        seen('read', '/home/u/.cache/capsule/stage/x'),
        seen('write', '/tmp/scratch'),
        seen('read', '/stage/abc/run.sh'),
        seen('read', '/p/sub/.capsule/x'),
      ],
      place,
    );
    expect(out.grants.fs).toEqual([]);
    expect(out.observed.map((o) => o.verdict)).toEqual([
      'capsule-state',
      'capsule-state',
      'other-capability',
      'not-found',
      'capsule-state',
    ]);
    expect(out.outside.map((o) => o.what)).toEqual([
      expect.stringMatching(/home/),
      expect.stringMatching(/capsule's own state/),
      expect.stringMatching(/scratch/),
    ]);
  });

  it('proposes each address and port connected to, flags IP literals and internal addresses, skips DNS', () => {
    const out = classify(
      [
        { op: 'connect', host: '127.0.0.1', port: 8080, outcome: 'ok', via: 'tracer' },
        { op: 'connect', host: '127.0.0.1', port: 9090, outcome: 'ok', via: 'tracer' },
        { op: 'connect', host: '10.0.0.2', port: 53, outcome: 'ok', via: 'tracer' },
        { op: 'http', host: 'api.example.com', port: 80, method: 'GET', outcome: 'refused', via: 'egress' },
      ],
      place,
    );
    expect(out.grants.network).toEqual([
      { host: '127.0.0.1', ports: [8080, 9090] },
      { host: 'api.example.com', ports: [80], methods: ['GET'] },
    ]);
    expect(out.observed[0]?.note).toMatch(/IP literal, a loopback \(internal\) address/);
    expect(out.observed.find((o) => o.port === 53)?.verdict).toBe('name-lookup');
  });
});
