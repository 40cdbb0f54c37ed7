import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { CommandResult } from '../../../src/tools/run-command.js';
import { agentFixture, codeOf } from '../agent/session-fixture.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

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
    // bash -c runs shell code: only a grant of the exact command covers it.
    const command = `bash -c 'sleep 30 & echo $! > child.pid; wait'`;
    const f = await agentFixture({ grants: [`run_command:${command}`] });
    const started = Date.now();
    const r = (await f.session.call('run_command', {
      command,
      timeoutMs: 500,
    })) as CommandResult;
    expect(r.timedOut).toBe(true);
    expect(Date.now() - started).toBeLessThan(5000);
    const pid = Number(await readFile(path.join(f.root, 'child.pid'), 'utf8'));
    for (let i = 0; i < 40 && alive(pid); i++) await delay(50);
    expect(alive(pid)).toBe(false);
  });

  it('an abort kills it and reports canceled', async () => {
    const f = await agentFixture({ grants: ['run_command:sleep'] });
    const ac = new AbortController();
    const p = f.session.call('run_command', { command: 'sleep 30' }, { signal: ac.signal });
    await delay(200);
    ac.abort();
    const r = (await p) as CommandResult;
    expect(r.canceled).toBe(true);
    expect(r.exitCode).toBeNull();
  });
});
