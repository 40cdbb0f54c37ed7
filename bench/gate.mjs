// The gate with its log: a whole `executor.run` of a preview1 capability, with the project's hash-chained
// audit log as capsule opens it (head in the per-user state folder, MAC'd with its key) and without it, beside
// the floor a durable decision cannot go under: one line appended to a file and fdatasynced, in the same
// folder, in the same run. Calls are interleaved (floor, with log, without) so the machine's noise falls on
// all three alike. A decision is durable before executor.run returns; the with-log row's distance from the
// floor is what the gate, the record and the head cost beyond the disk's own flush.
import { closeSync, cpSync, fdatasyncSync, openSync, writeSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stats } from './stats.mjs';

const FLOOR = 'gate: floor, one record appended and fdatasynced (same folder)';

export async function benchGate({ root, iterations = 300 }) {
  const { openRuntime } = await import('../dist/runtime/runtime.js');
  const { createNonInteractivePrompter } = await import('../dist/permissions/prompter.js');
  const { verifyAuditLog } = await import('../dist/permissions/audit/verify.js');
  const { auditLogPath } = await import('../dist/project/audit-paths.js');
  const dir = await mkdtemp(path.join(tmpdir(), 'capsule-bench-gate-'));
  const project = path.join(dir, 'project');
  cpSync(path.join(root, 'capabilities', 'shout-wasm'), path.join(project, 'capabilities', 'shout-wasm'), {
    recursive: true,
  });
  await writeFile(
    path.join(project, 'capsule.json'),
    JSON.stringify({ schemaVersion: 1, mode: 'default', roots: ['capabilities'] }),
  );
  const env = { ...process.env, XDG_CACHE_HOME: path.join(dir, 'cache') };
  const open = async (audit) => {
    const runtime = await openRuntime({
      cwd: project,
      env,
      stateDir: path.join(dir, 'state'),
      cacheDir: path.join(dir, 'cache'),
      grants: ['run_capability:shout-wasm'],
    });
    const gate = await runtime.openGate({
      prompter: createNonInteractivePrompter(),
      ...(audit ? {} : { audit: false }),
    });
    return runtime.openExecutor(gate);
  };
  const logged = await open(true);
  const bare = await open(false);
  const floorFile = path.join(project, '.capsule', 'floor.jsonl');
  const line = Buffer.from(`${JSON.stringify({ seq: 0, decision: 'allow', pad: 'x'.repeat(300) })}\n`);
  const floor = () => {
    const fd = openSync(floorFile, 'a', 0o600);
    try {
      writeSync(fd, line);
      fdatasyncSync(fd);
    } finally {
      closeSync(fd);
    }
  };
  const call = async (executor) => {
    const { result } = await executor.run('shout-wasm', { a: 'b' });
    if (result.exitCode !== 0) throw new Error(`shout-wasm failed: ${result.stderr}`);
  };
  const samples = { floor: [], logged: [], bare: [] };
  try {
    for (let i = 0; i < iterations + 10; i++) {
      let t = performance.now();
      floor();
      const f = performance.now() - t;
      t = performance.now();
      await call(logged);
      const l = performance.now() - t;
      t = performance.now();
      await call(bare);
      const b = performance.now() - t;
      if (i >= 10) {
        samples.floor.push(f);
        samples.logged.push(l);
        samples.bare.push(b);
      }
    }
    const verdict = await verifyAuditLog(auditLogPath(project));
    if (!verdict.ok) throw new Error(`the benchmark's audit log does not verify: ${verdict.problem}`);
  } finally {
    await logged.close?.();
    await bare.close?.();
    await rm(dir, { recursive: true, force: true });
  }
  const floorStats = stats(samples.floor);
  const withLog = stats(samples.logged);
  return [
    { name: FLOOR, isFloor: true, ...floorStats },
    {
      name: `gate: executor.run preview1 with the audit log (floor + ${(withLog.median - floorStats.median).toFixed(2)} ms)`,
      ...withLog,
      floor: FLOOR,
    },
    { name: 'gate: executor.run preview1, no audit log', ...stats(samples.bare), floor: FLOOR },
  ];
}
