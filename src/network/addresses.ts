import { BlockList, isIP } from 'node:net';

/** What kind of address an IP is, for the egress policy: only `public` is reachable without naming it. */
export type AddressKind = 'public' | 'loopback' | 'private' | 'link-local' | 'unspecified' | 'reserved';

const RANGES: ReadonlyArray<[AddressKind, string, number, 'ipv4' | 'ipv6']> = [
  ['unspecified', '0.0.0.0', 8, 'ipv4'],
  ['private', '10.0.0.0', 8, 'ipv4'],
  ['private', '100.64.0.0', 10, 'ipv4'],
  ['loopback', '127.0.0.0', 8, 'ipv4'],
  ['link-local', '169.254.0.0', 16, 'ipv4'],
  ['private', '172.16.0.0', 12, 'ipv4'],
  ['reserved', '192.0.0.0', 24, 'ipv4'],
  ['private', '192.168.0.0', 16, 'ipv4'],
  ['reserved', '198.18.0.0', 15, 'ipv4'],
  ['reserved', '224.0.0.0', 4, 'ipv4'],
  ['reserved', '240.0.0.0', 4, 'ipv4'],
  ['unspecified', '::', 128, 'ipv6'],
  ['loopback', '::1', 128, 'ipv6'],
  // Forms that embed an IPv4 address that may be internal (IPv4-compatible, SIIT-translated, NAT64 well-known
  // and local-use, Teredo, 6to4): never reached without naming them.
  ['reserved', '::', 96, 'ipv6'],
  ['reserved', '::ffff:0:0:0', 96, 'ipv6'],
  ['reserved', '64:ff9b::', 96, 'ipv6'],
  ['reserved', '64:ff9b:1::', 48, 'ipv6'],
  ['reserved', '2001::', 32, 'ipv6'],
  ['reserved', '2002::', 16, 'ipv6'],
  // Deprecated site-local: private in all but name.
  ['private', 'fec0::', 10, 'ipv6'],
  ['private', 'fc00::', 7, 'ipv6'],
  ['link-local', 'fe80::', 10, 'ipv6'],
  ['reserved', 'ff00::', 8, 'ipv6'],
];

const LISTS = new Map<AddressKind, BlockList>();
for (const [kind, net, prefix, type] of RANGES) {
  let list = LISTS.get(kind);
  if (list === undefined) LISTS.set(kind, (list = new BlockList()));
  list.addSubnet(net, prefix, type);
}

/** An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) is that IPv4 address: judged as one. */
export function unmapped(address: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (m?.[1] !== undefined) return m[1];
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (hex?.[1] !== undefined && hex[2] !== undefined) {
    const hi = parseInt(hex[1], 16);
    const lo = parseInt(hex[2], 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return address;
}

/** Pure: the kind of an IP address (anything that is not an IP is `reserved`: never reached). */
export function addressKind(raw: string): AddressKind {
  const address = unmapped(raw);
  const family = isIP(address);
  if (family === 0) return 'reserved';
  const type = family === 4 ? 'ipv4' : 'ipv6';
  for (const [kind, list] of LISTS) if (list.check(address, type)) return kind;
  return 'public';
}

/** Pure: whether `address` is inside one of `ranges` (IP addresses or CIDR ranges, as a grant writes them). */
export function inRanges(raw: string, ranges: readonly string[]): boolean {
  const address = unmapped(raw);
  const family = isIP(address);
  if (family === 0) return false;
  const list = new BlockList();
  for (const range of ranges) {
    const [net = '', prefixText] = range.split('/');
    const netFamily = isIP(unmapped(net));
    if (netFamily === 0) continue;
    const type = netFamily === 4 ? 'ipv4' : 'ipv6';
    const max = netFamily === 4 ? 32 : 128;
    const prefix = prefixText === undefined ? max : Number(prefixText);
    if (!Number.isInteger(prefix) || prefix < 0 || prefix > max) continue;
    list.addSubnet(unmapped(net), prefix, type);
  }
  return list.check(address, family === 4 ? 'ipv4' : 'ipv6');
}
