import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { tempProject } from '../../helpers/capability.js';
import { BUILT_CLI } from '../../helpers/cli.js';

/**
 * `capsule mcp` stopped by a signal closes itself (runners, session) and exits 0, also after a call
 * made the audit log take its file lock (whose signal-exit handler re-raises a signal nobody else
 * listens for). Judged by the exit code of the built binary.
 */
describe('capsule mcp on SIGTERM / SIGINT', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`${signal} after a recorded call: a clean exit 0, not death by the signal`, async () => {
      const { root } = await tempProject('capsule-mcp-signal-');
      await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
      const child = execa('node', [BUILT_CLI, 'mcp'], { cwd: root, reject: false, stdin: 'pipe' });
      const responses: string[] = [];
      let seen: (n: number) => void = () => undefined;
      child.stdout?.on('data', (c: Buffer) => {
        responses.push(...c.toString().split('\n').filter(Boolean));
        seen(responses.length);
      });
      const answered = (n: number) =>
        new Promise<void>((resolve) => {
          seen = (k) => k >= n && resolve();
          seen(responses.length);
        });
      const send = (m: unknown) => child.stdin?.write(`${JSON.stringify(m)}\n`);
      send({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
      });
      await answered(1);
      send({ jsonrpc: '2.0', method: 'notifications/initialized' });
      // A gated call (audited) with no person to ask: a denial is written under the audit lock.
      send({
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'write_file', arguments: { path: 'x.txt', content: 'x' } },
      });
      await answered(2);
      child.kill(signal);
      const r = await child;
      expect({ code: r.exitCode, signal: r.signal ?? null }).toEqual({ code: 0, signal: null });
    });
  }
});
