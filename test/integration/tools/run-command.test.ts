import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CommandResult } from '../../../src/tools/run-command.js';
import { eventually } from '../../helpers/eventually.js';
import { pastSleepOf, processesWith, survivors } from '../../helpers/processes.js';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';

describe('run_command', () => {
  it('is keyed by the engine: a program grant covers simple commands only', async () => {
    const f = await agentFixture({ grants: ['run_command:echo'] });
    const r = (await f.session.call('run_command', { command: 'echo "a && b"' })) as CommandResult;
    expect(r.stdout).toBe('a && b\n');
    expect(await codeOf(f.session.call('run_command', { command: 'echo a && touch pwned' }))).toBe(
      'PERMISSION_DENIED',
    );
    expect(await codeOf(f.session.call('run_command', { command: 'echo $(touch pwned)' }))).toBe(
      'PERMISSION_DENIED',
    );
    expect(existsSync(path.join(f.root, 'pwned'))).toBe(false);
    expect(f.asked()).toEqual(['run_command:echo a && touch pwned', 'run_command:echo $(touch pwned)']);
  });

  it('kills the whole process group on timeout', async () => {
    // bash -c runs shell code: only a grant of the exact command covers it. The token names the
    // grandchild on the host's process list.
    const token = `capsule-child-${randomUUID()}`;
    const command = `bash -c 'sh -c "sleep 30" "$0" & wait' ${token}`;
    const f = await agentFixture({ grants: [`run_command:${command}`] });
    const r = (await f.session.call('run_command', { command, timeoutMs: 500 })) as CommandResult;
    expect(r.timedOut).toBe(true);
    expect(await survivors(token)).toEqual([]);
  });

  it('leaves nothing running: setsid, double fork, nohup and detached spawns die with the command', async () => {
    const f = await agentFixture({ grants: ['run_command:bash'] });
    const d = path.join(f.root, 'markers');
    await mkdir(d);
    const script = [
      `setsid sh -c 'sleep 1; echo x > "$0/setsid"' "${d}" &`,
      `( sh -c 'sleep 1; echo x > "$0/double-fork"' "${d}" & ) &`,
      `nohup sh -c 'sleep 1; echo x > "$0/nohup"' "${d}" >/dev/null 2>&1 &`,
      `sh -c 'sleep 1; echo x > "$0/disown"' "${d}" & disown`,
      `node -e 'require("child_process").spawn("sh", ["-c", "sleep 1; echo x > \\"$0/node\\"", process.argv[1]], { detached: true, stdio: "ignore" }).unref()' "${d}"`,
      'sleep 0.2',
    ].join('\n');
    await writeFile(path.join(f.root, 'daemons.sh'), script);
    const r = (await f.session.call('run_command', { command: 'bash daemons.sh' })) as CommandResult;
    expect(r.exitCode).toBe(0);
    expect(await survivors(d)).toEqual([]);
    await pastSleepOf(1);
    expect(await readdir(d)).toEqual([]);
  });

  it("cannot change capsule's state: capsule.json and .capsule/ are read-only to it", async () => {
    const f = await agentFixture({ grants: ['run_command:bash'] });
    await mkdir(path.join(f.root, '.capsule'), { recursive: true });
    await writeFile(path.join(f.root, '.capsule', 'keep'), 'kept\n');
    const config = await readFile(path.join(f.root, 'capsule.json'), 'utf8');
    const script = [
      `echo '{"schemaVersion":1,"mode":"bypass"}' > capsule.json`,
      'mv capsule.json moved.json',
      'ln -sf moved.json capsule.json',
      'echo gone > .capsule/keep',
      'rm -rf .capsule',
      'umount capsule.json',
      'true',
    ].join('\n');
    await writeFile(path.join(f.root, 'tamper.sh'), script);
    const r = (await f.session.call('run_command', { command: 'bash tamper.sh' })) as CommandResult;
    expect(r.exitCode).toBe(0);
    expect(await readFile(path.join(f.root, 'capsule.json'), 'utf8')).toBe(config);
    expect(await readFile(path.join(f.root, '.capsule', 'keep'), 'utf8')).toBe('kept\n');
    expect(existsSync(path.join(f.root, 'moved.json'))).toBe(false);
  });

  it('cannot plant or change Claude Code’s project settings (control: bash writes elsewhere in the project)', async () => {
    const f = await agentFixture({ grants: ['run_command:bash'] });
    const script = [
      'mkdir -p .claude',
      `echo '{"hooks":{}}' > .claude/settings.local.json`,
      'mv .claude .claude-old',
      'echo built > built.txt',
      'true',
    ].join('\n');
    await writeFile(path.join(f.root, 'claude.sh'), script);
    const r = (await f.session.call('run_command', { command: 'bash claude.sh' })) as CommandResult;
    expect(r.exitCode).toBe(0);
    expect(existsSync(path.join(f.root, '.claude', 'settings.local.json'))).toBe(false);
    expect(existsSync(path.join(f.root, '.claude-old'))).toBe(false);
    expect(await readFile(path.join(f.root, 'built.txt'), 'utf8')).toBe('built\n');
  });

  it('an abort kills it and reports canceled', async () => {
    const f = await agentFixture({ grants: ['run_command:sleep'] });
    const ac = new AbortController();
    // A duration no other process on the machine sleeps, so its command line tells when it runs.
    const duration = `30.${process.pid}`;
    const p = f.session.call('run_command', { command: `sleep ${duration}` }, { signal: ac.signal });
    await eventually(() => processesWith(`sleep\u0000${duration}`).length > 0, 'the command to be running');
    ac.abort();
    const r = (await p) as CommandResult;
    expect(r.canceled).toBe(true);
    expect(r.exitCode).toBeNull();
    expect(await survivors(`sleep\u0000${duration}`)).toEqual([]);
  });
});
