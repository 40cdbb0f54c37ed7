import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StateKey } from '../../../src/project/state-key.js';
import { OneUseGrantStore } from '../../../src/permissions/one-use-grants.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function store(now = () => Date.now()): Promise<OneUseGrantStore> {
  const stateDir = await mkdtemp(path.join(tmpdir(), 'capsule-one-use-'));
  dirs.push(stateDir);
  return new OneUseGrantStore({ stateDir, key: new StateKey({ stateDir }), now });
}

const GRANT = { key: 'run_command:git', projectRoot: '/p', ttlMs: 60_000, origin: 'test' };

describe('OneUseGrantStore', () => {
  it('a minted grant is redeemed once, for its key; the second redeem is refused', async () => {
    const s = await store();
    const id = await s.mint(GRANT);
    expect(await s.redeem(id, '/p')).toEqual({ key: 'run_command:git', origin: 'test' });
    await expect(s.redeem(id, '/p')).rejects.toThrow(/no such grant/);
    expect(await readdir(s.dir)).toEqual([]);
  });

  it('of several redeemers of one id exactly one gets it', async () => {
    const s = await store();
    const id = await s.mint(GRANT);
    const results = await Promise.allSettled(Array.from({ length: 8 }, () => s.redeem(id, '/p')));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
  });

  it('a grant written by anything but capsule (no MAC, a changed key) is refused', async () => {
    const s = await store();
    const id = await s.mint(GRANT);
    const file = path.join(s.dir, `${id}.json`);
    const doc = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    await writeFile(file, JSON.stringify({ ...doc, key: 'run_command:rm -rf /' }));
    await expect(s.redeem(id, '/p')).rejects.toThrow(/MAC does not verify/);
    const forged = 'f'.repeat(32);
    await writeFile(
      path.join(s.dir, `${forged}.json`),
      JSON.stringify({ ...doc, id: forged, mac: 'hmac-sha256:' + '0'.repeat(64) }),
    );
    await expect(s.redeem(forged, '/p')).rejects.toThrow(/MAC does not verify/);
  });

  it('an expired grant, one of another project, and an id that is not one are refused', async () => {
    let now = 1_000_000;
    const s = await store(() => now);
    const id = await s.mint(GRANT);
    now += 60_001;
    await expect(s.redeem(id, '/p')).rejects.toThrow(/expired/);
    const other = await s.mint(GRANT);
    await expect(s.redeem(other, '/q')).rejects.toThrow(/another project|minted for the project/);
    for (const bad of ['../../secret/state.key', '', 'ABCDEF0123456789ABCDEF0123456789'])
      await expect(s.redeem(bad, '/p')).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
  });
});
