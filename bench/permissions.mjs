// Permission engine throughput: command keying (a real bash parse per command) and gate decisions
// (engine.check: rules → mode → allowlists), without and with the hash-chained audit log (and its head) on disk.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const COMMANDS = [
  'git status',
  'git commit -m "a && b"',
  'git status && git push origin main',
  'ls -la | grep foo > out.txt',
  'echo $(whoami)',
  'FOO=1 make test',
  'cat <<EOF\nhi\nEOF',
  'npm run build',
];

async function rate(fn, { seconds = 1.5 } = {}) {
  for (let i = 0; i < 200; i++) await fn(i); // warm up
  let n = 0;
  const started = performance.now();
  while (performance.now() - started < seconds * 1000) {
    for (let i = 0; i < 100; i++) await fn(n++);
  }
  const elapsed = performance.now() - started;
  return { n, median: elapsed / n, p95: undefined, perSecond: (n / elapsed) * 1000 };
}

export async function benchPermissions() {
  const { createCommandParser, keyCommand } = await import('../dist/permissions/command-parser.js');
  const { PermissionEngine } = await import('../dist/permissions/engine.js');
  const { createNonInteractivePrompter } = await import('../dist/permissions/prompter.js');
  const { JsonlAuditLog } = await import('../dist/permissions/audit-log.js');
  const parser = await createCommandParser();
  const root = await mkdtemp(path.join(tmpdir(), 'capsule-bench-perm-'));
  try {
    const keying = await rate((i) => keyCommand(parser, COMMANDS[i % COMMANDS.length]));
    const request = (i) => ({
      tool: 'run_capability',
      kind: 'OTHER',
      key: {
        tool: 'run_capability',
        action: `cap${i % 4}`,
        raw: `run_capability:cap${i % 4}`,
        compound: false,
      },
      subject: `cap${i % 4}`,
      sandboxed: true,
      contentHash: 'sha256:' + 'a'.repeat(64),
    });
    const options = {
      projectRoot: root,
      config: {
        schemaVersion: 1,
        roots: ['capabilities'],
        allowlist: {},
        permissions: { allow: [], deny: ['run_command(rm *)'] },
      },
      sessionGrants: [
        'run_capability:cap0',
        'run_capability:cap1',
        'run_capability:cap2',
        'run_capability:cap3',
      ],
      prompter: createNonInteractivePrompter(),
    };
    const bare = await PermissionEngine.create({ ...options, audit: false });
    const decisions = await rate((i) => bare.check(request(i)));
    const audited = await PermissionEngine.create({
      ...options,
      // With its head (count + last hash) replaced after every append, as capsule runs it.
      audit: new JsonlAuditLog(
        path.join(root, '.capsule', 'audit.jsonl'),
        { now: () => Date.now() },
        { headFile: path.join(root, 'state', 'audit-heads', 'bench.json') },
      ),
    });
    const auditedDecisions = await rate((i) => audited.check(request(i)), { seconds: 1 });
    return [
      { name: 'permissions: command keying (bash parse)', ...keying },
      { name: 'permissions: gate decisions, no audit', ...decisions },
      { name: 'permissions: gate decisions + audit log', ...auditedDecisions },
    ];
  } finally {
    parser.close?.();
    await rm(root, { recursive: true, force: true });
  }
}
