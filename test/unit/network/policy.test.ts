import { describe, expect, it } from 'vitest';
import { parseManifest } from '../../../src/manifest/parse.js';
import { networkGrantSchema, type NetworkGrant } from '../../../src/manifest/schema.js';
import { addressKind, inRanges } from '../../../src/network/addresses.js';
import { checkAddress, describeGrants, matchGrant, normalizeHost } from '../../../src/network/policy.js';

const grant = (g: Record<string, unknown>): NetworkGrant => networkGrantSchema.parse(g);

function manifestWith(network: unknown): ReturnType<typeof parseManifest> {
  return parseManifest(
    JSON.stringify({
      schemaVersion: 1,
      name: 'n',
      description: 'd',
      environment: 'docker',
      entry: 'run.sh',
      docker: { image: 'capsule/busybox:1' },
      grants: { network },
    }),
  );
}

describe('grants.network in the manifest', () => {
  it.each([
    [['*'], /bare "\*"/],
    [[{ host: '*' }], /bare "\*"/],
    [[{ host: '*.com' }], /top-level domain/],
    [[{ host: 'a.*.example.com' }], /only as the whole first label/],
    [[{ host: 'example.com:443' }], /put the port in "ports"/],
    [[{ host: 'Example.com' }], /lower case/],
    [[{ host: '::1' }], /in brackets/],
    [[{ host: 'exa mple.com' }], /DNS name/],
    [[{ host: '10.0.0' }], /IPv4/],
    [['example.com'], /must be an object/],
    [[{ host: 'example.com', ports: [0] }], /./],
    [[{ host: 'example.com', methods: ['CONNECT'] }], /./],
    [[{ host: 'example.com', internal: ['not-an-ip'] }], /IP address or CIDR/],
    [[{ host: 'example.com', extra: 1 }], /./],
  ])('refuses %j with a message naming the field', (network, message) => {
    const r = manifestWith(network);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.issues[0]?.field).toMatch(/^grants\.network\[0\]/);
    expect(r.issues.map((i) => i.message).join(' ')).toMatch(message);
  });

  it.each([
    { host: 'api.example.com' },
    { host: '*.example.com', ports: [443, 8443] },
    { host: '192.0.2.7', ports: [80], methods: ['GET'] },
    { host: '[2001:db8::7]' },
    { host: 'db.internal', internal: ['10.0.0.0/8'] },
  ])('accepts %j', (g) => {
    expect(manifestWith([g]).ok).toBe(true);
  });
});

describe('matchGrant (pure)', () => {
  const grants = [
    grant({ host: 'api.example.com', ports: [443] }),
    grant({ host: '*.cdn.example.com', methods: ['GET', 'HEAD'] }),
    grant({ host: '192.0.2.7', ports: [8080] }),
  ];

  it('exact host, listed port', () => {
    expect(matchGrant(grants, { host: 'api.example.com', port: 443, method: 'CONNECT' })).toMatchObject({
      ok: true,
      index: 0,
    });
    expect(matchGrant(grants, { host: 'api.example.com', port: 80, method: 'GET' })).toMatchObject({
      ok: false,
      reason: /port 80/,
    });
    expect(matchGrant(grants, { host: 'www.example.com', port: 443, method: 'GET' })).toMatchObject({
      ok: false,
      reason: /not in grants\.network/,
    });
    // Suffix tricks are other hosts.
    expect(matchGrant(grants, { host: 'api.example.com.evil.test', port: 443, method: 'GET' }).ok).toBe(
      false,
    );
    expect(matchGrant(grants, { host: 'evilapi.example.com', port: 443, method: 'GET' }).ok).toBe(false);
  });

  it('a wildcard covers subdomains, not the name itself; default ports are 443 and 80', () => {
    expect(matchGrant(grants, { host: 'a.cdn.example.com', port: 80, method: 'GET' }).ok).toBe(true);
    expect(matchGrant(grants, { host: 'a.b.cdn.example.com', port: 443, method: 'HEAD' }).ok).toBe(true);
    expect(matchGrant(grants, { host: 'cdn.example.com', port: 443, method: 'GET' }).ok).toBe(false);
    expect(matchGrant(grants, { host: 'xcdn.example.com', port: 443, method: 'GET' }).ok).toBe(false);
    expect(matchGrant(grants, { host: 'a.cdn.example.com', port: 8443, method: 'GET' }).ok).toBe(false);
  });

  it('methods: listed only; a tunnel is refused under a method list', () => {
    expect(matchGrant(grants, { host: 'a.cdn.example.com', port: 443, method: 'POST' })).toMatchObject({
      ok: false,
      reason: /method POST/,
    });
    expect(matchGrant(grants, { host: 'a.cdn.example.com', port: 443, method: 'CONNECT' })).toMatchObject({
      ok: false,
      reason: /tunnel/,
    });
  });

  it('IP literals only by name, in any spelling', () => {
    for (const raw of ['192.0.2.7', '3221225991', '0xc0.0.2.7']) {
      const host = normalizeHost(raw) ?? '';
      expect(matchGrant(grants, { host, port: 8080, method: 'GET' }).ok, raw).toBe(true);
    }
    expect(matchGrant(grants, { host: '192.0.2.8', port: 8080, method: 'GET' })).toMatchObject({
      ok: false,
      reason: /IP address no grant names/,
    });
    // A wildcard never covers an address.
    expect(
      matchGrant([grant({ host: '*.example.com' })], { host: '127.0.0.1', port: 80, method: 'GET' }).ok,
    ).toBe(false);
  });

  it('normalizeHost: case, trailing dot, brackets; refuses what is not a host', () => {
    expect(normalizeHost('API.Example.COM.')).toBe('api.example.com');
    expect(normalizeHost('[::FFFF:127.0.0.1]')).toBe('[::ffff:7f00:1]');
    expect(normalizeHost('a@b')).toBeUndefined();
    expect(normalizeHost('a/b')).toBeUndefined();
    expect(normalizeHost('')).toBeUndefined();
  });
});

describe('checkAddress (pure)', () => {
  const target = { host: 'api.example.com', port: 443, method: 'GET' };
  it.each([
    ['127.0.0.1', 'loopback'],
    ['::1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'private'],
    ['fd00::1', 'private'],
    ['169.254.169.254', 'link-local'],
    ['fe80::1', 'link-local'],
    ['0.0.0.0', 'unspecified'],
    ['::', 'unspecified'],
    ['64:ff9b::7f00:1', 'reserved'],
    ['64:ff9b:1::a00:1', 'reserved'],
    ['::127.0.0.1', 'reserved'],
    ['::ffff:0:127.0.0.1', 'reserved'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'reserved'],
    ['fec0::1', 'private'],
    ['::1', 'loopback'],
    ['224.0.0.1', 'reserved'],
  ])('%s is %s and refused unless named', (address, kind) => {
    expect(addressKind(address)).toBe(kind);
    expect(checkAddress(grant({ host: 'api.example.com' }), target, address)).toMatchObject({ ok: false });
  });

  it('public addresses pass; internal ones pass when the grant names them', () => {
    expect(addressKind('93.184.216.34')).toBe('public');
    expect(checkAddress(grant({ host: 'api.example.com' }), target, '93.184.216.34')).toEqual({ ok: true });
    const g = grant({ host: 'api.example.com', internal: ['10.0.0.0/8', '127.0.0.1'] });
    expect(checkAddress(g, target, '10.200.0.1')).toEqual({ ok: true });
    expect(checkAddress(g, target, '127.0.0.1')).toEqual({ ok: true });
    expect(checkAddress(g, target, '::ffff:127.0.0.1')).toEqual({ ok: true });
    expect(checkAddress(g, target, '127.0.0.2').ok).toBe(false);
    expect(checkAddress(g, target, '169.254.169.254').ok).toBe(false);
    expect(inRanges('10.0.0.1', ['10.0.0.0/33'])).toBe(false);
  });

  it('an IP-literal host names its own address', () => {
    const g = grant({ host: '127.0.0.1', ports: [80] });
    expect(checkAddress(g, { host: '127.0.0.1', port: 80, method: 'GET' }, '127.0.0.1')).toEqual({
      ok: true,
    });
  });

  it('describeGrants shows hosts, ports, methods and internal ranges', () => {
    expect(
      describeGrants([
        grant({ host: 'api.example.com', ports: [443], methods: ['GET'] }),
        grant({ host: 'db.test', internal: ['10.0.0.0/8'] }),
      ]),
    ).toBe('api.example.com:443 (GET); db.test:443,80 [internal 10.0.0.0/8]');
  });
});
