// Permission engine throughput: command keying (a real bash parse per command) and gate decisions
// (engine.check: rules → mode → allowlists), without and with the hash-chained audit log (and its head) on
// disk (the head authenticated with the per-user key). With the log, a decision returns only once its record is fsynced: one caller at a time pays a whole
// lock + write + fsync per decision; concurrent callers share them (group commit).
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

const CALLERS = 64;

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

/** `callers` loops deciding at once for `seconds`; median is wall time per decision. */
async function concurrentRate(fn, { callers, seconds = 1.5 }) {
  let n = 0;
  await Promise.all(Array.from({ length: callers }, () => fn(n++))); // warm up
  n = 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  // The clock is read in the loop: a decision without I/O never yields to timers.
  const loop = async () => {
    while (performance.now() < end) await fn(n++);
  };
  await Promise.all(Array.from({ length: callers }, loop));
  const elapsed = performance.now() - started;
  return { n, median: elapsed / n, p95: undefined, perSecond: (n / elapsed) * 1000 };
}

export async function benchPermissions() {
  const { createCommandParser } = await import('../dist/permissions/commands/parser.js');
  const { keyCommand } = await import('../dist/permissions/commands/permission.js');
  const { PermissionEngine } = await import('../dist/permissions/engine.js');
  const { createNonInteractivePrompter } = await import('../dist/permissions/prompter.js');
  const { JsonlAuditLog } = await import('../dist/permissions/audit/writer.js');
  const { verifyAuditLog } = await import('../dist/permissions/audit/verify.js');
  const { StateKey } = await import('../dist/project/state-key.js');
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
        mode: 'default',
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
    const bareConcurrent = await concurrentRate((i) => bare.check(request(i)), { callers: CALLERS });
    // With its head (count + last hash) in the state folder, as capsule runs it.
    // The head carries an HMAC with the state folder's key (made on first use), as capsule writes it.
    const logFile = path.join(root, '.capsule', 'audit.jsonl');
    const stateDir = path.join(root, 'state');
    const head = { file: path.join(stateDir, 'audit-heads', 'bench.json'), key: new StateKey({ stateDir }) };
    const audited = await PermissionEngine.create({
      ...options,
      audit: new JsonlAuditLog(logFile, { now: () => Date.now() }, { head }),
    });
    const auditedDecisions = await rate((i) => audited.check(request(i)), { seconds: 1 });
    const auditedConcurrent = await concurrentRate((i) => audited.check(request(i)), { callers: CALLERS });
    const verdict = await verifyAuditLog(logFile, { head });
    if (!verdict.ok) throw new Error(`the benchmark's audit log does not verify: ${verdict.problem}`);
    return [
      { name: 'permissions: command keying (bash parse)', ...keying },
      { name: 'permissions: gate decisions, no audit (floor)', ...decisions },
      { name: `permissions: gate decisions, no audit, ${CALLERS} callers (floor)`, ...bareConcurrent },
      { name: 'permissions: gate decisions + audit log, 1 caller', ...auditedDecisions },
      { name: `permissions: gate decisions + audit log, ${CALLERS} callers`, ...auditedConcurrent },
    ];
  } finally {
    parser.close?.();
    await rm(root, { recursive: true, force: true });
  }
}
