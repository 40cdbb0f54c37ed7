import { readFile, writeFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { JsonlAuditLog } from '../../../../src/permissions/audit/writer.js';
import { verifyAuditLog } from '../../../../src/permissions/audit/verify.js';
import { auditLogPath } from '../../../../src/project/audit-paths.js';
import { fakeClock, HASH_A, tempProject } from '../helpers.js';

describe('network request records in the audit log', () => {
  it('are chained and verified like any record; a changed byte count is detected', async () => {
    const { root } = await tempProject();
    const file = auditLogPath(root);
    const log = new JsonlAuditLog(file, fakeClock());
    await log.append({
      tool: 'network',
      key: 'network:api.example.com:443',
      decision: 'allow',
      source: 'network-grant',
      reason: 'fetcher: CONNECT api.example.com:443 allowed: allowed by grants.network[0] (api.example.com)',
      mode: 'default',
      contentHash: HASH_A,
      network: {
        capability: 'fetcher',
        host: 'api.example.com',
        port: 443,
        method: 'CONNECT',
        address: '93.184.216.34',
        bytesOut: 517,
        bytesIn: 4096,
      },
    });
    await log.append({
      tool: 'network',
      key: 'network:evil.test:80',
      decision: 'deny',
      source: 'egress-policy',
      reason: 'fetcher: GET evil.test:80 refused: evil.test is not in grants.network',
      mode: 'default',
      contentHash: HASH_A,
      network: { capability: 'fetcher', host: 'evil.test', port: 80, method: 'GET', bytesOut: 0, bytesIn: 0 },
    });
    expect(await verifyAuditLog(file)).toMatchObject({ ok: true, records: 2 });
    const lines = (await readFile(file, 'utf8')).trimEnd().split('\n');
    expect(JSON.parse(lines[0] as string)).toMatchObject({
      network: { bytesIn: 4096, address: '93.184.216.34' },
    });
    // Someone makes the exfiltration look smaller: the chain shows it.
    lines[0] = (lines[0] as string).replace('"bytesIn":4096', '"bytesIn":40');
    await writeFile(file, `${lines.join('\n')}\n`);
    expect(await verifyAuditLog(file)).toMatchObject({ ok: false, line: 1 });
  });
});
