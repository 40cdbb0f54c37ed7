import { createHash } from 'node:crypto';

/**
 * What someone with a text editor and sha256 does to an audit log: the records re-chained from the first
 * one into a whole new, self-consistent chain (plain hashes; only the MAC'd heads can tell).
 */
export function forgeChain(records: Array<Record<string, unknown>>): string {
  let prev = '0'.repeat(64);
  return records
    .map((r, seq) => {
      const { hash: _old, ...rest } = r;
      const body = { ...rest, seq, prev };
      const hash = createHash('sha256').update(JSON.stringify(body)).digest('hex');
      prev = hash;
      return `${JSON.stringify({ ...body, hash })}\n`;
    })
    .join('');
}
