// Shell runner overhead: capsule's path (registry lookup + gate + input validation + ShellRunner)
// vs a bare execa spawn of the same script, in one process, measured alternately so noise hits both.
import { execa } from 'execa';
import { stats } from './stats.mjs';

export async function benchShell({ root, iterations = 50 }) {
  const { Registry } = await import('../dist/registry/registry.js');
  const { ShellRunner } = await import('../dist/runners/shell-runner.js');
  const { Executor } = await import('../dist/executor/executor.js');
  const { PermissionEngine } = await import('../dist/permissions/engine.js');
  const { createNonInteractivePrompter } = await import('../dist/permissions/prompter.js');
  const registry = new Registry({ roots: ['capabilities'], projectRoot: root });
  const executor = new Executor({
    registry,
    // The real gate; audit off so the bench leaves no log in the repo (its cost is measured in the permissions suite).
    gate: await PermissionEngine.create({
      projectRoot: root,
      sessionGrants: ['run_capability:shout'],
      prompter: createNonInteractivePrompter(),
      audit: false,
    }),
    runners: [new ShellRunner()],
  });
  const cap = await registry.get('shout');
  const bare = [];
  const ours = [];
  for (let i = 0; i < iterations + 5; i++) {
    let t = performance.now();
    await execa('sh', [cap.entryPath], {
      cwd: cap.dir,
      input: '{"a":"b"}',
      extendEnv: false,
      env: { PATH: '/usr/bin:/bin' },
    });
    const b = performance.now() - t;
    t = performance.now();
    const { result } = await executor.run('shout', { a: 'b' });
    const o = performance.now() - t;
    if (result.exitCode !== 0) throw new Error(`shout failed: ${result.stderr}`);
    if (i >= 5) {
      bare.push(b);
      ours.push(o);
    }
  }
  await executor.close();
  return [
    { name: 'shell: bare execa spawn', isFloor: true, ...stats(bare) },
    {
      name: 'shell: capsule run (lookup+gate+validate+run)',
      ...stats(ours),
      floor: 'shell: bare execa spawn',
    },
  ];
}
