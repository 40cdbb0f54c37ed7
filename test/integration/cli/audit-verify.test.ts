import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject } from '../../helpers/capability.js';
import { forgeChain } from '../../helpers/audit-forgery.js';

/**
 * `capsule audit verify` against someone who can edit the project's .capsule/audit.jsonl but not
 * the per-user state directory that holds the log's head. Judged by the exit code.
 */
async function auditedProject(decisions = 4): Promise<{
  root: string;
  log: string;
  env: NodeJS.ProcessEnv;
  verify: () => Promise<number>;
  exec: (command: string, grant?: string) => Promise<number>;
}> {
  const { root } = await tempProject('capsule-audit-');
  await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}');
  const state = await mkdtemp(path.join(tmpdir(), 'capsule-state-'));
  const env = { ...process.env, XDG_STATE_HOME: state };
  const exec = async (command: string, grant?: string): Promise<number> =>
    (
      await cli(['exec', ...(grant !== undefined ? ['--grant', grant] : []), '--no-prompt', '--', command], {
        cwd: root,
        env,
      })
    ).code;
  for (let i = 0; i < decisions; i++) await exec(`touch refused-${i}`); // each a recorded denial
  const verify = async (): Promise<number> => (await cli(['audit', 'verify'], { cwd: root, env })).code;
  return { root, log: path.join(root, '.capsule', 'audit.jsonl'), env, verify, exec };
}

async function lines(file: string): Promise<string[]> {
  return (await readFile(file, 'utf8')).split('\n').filter((l) => l !== '');
}

describe('capsule audit verify detects what it claims', () => {
  it('an untouched log verifies (exit 0), and keeps verifying as it grows', async () => {
    const p = await auditedProject();
    expect(await p.verify()).toBe(0);
    await p.exec('touch more');
    expect(await p.verify()).toBe(0);
    const json = await cli(['audit', 'verify', '--json'], { cwd: p.root, env: p.env });
    expect(JSON.parse(json.stdout)).toMatchObject({ ok: true, records: 5, anchored: true, anchoredFrom: 0 });
  });

  it('cutting the tail (last line removed) is detected', async () => {
    const p = await auditedProject();
    const l = await lines(p.log);
    await writeFile(p.log, `${l.slice(0, -1).join('\n')}\n`);
    expect(await p.verify()).toBe(1);
  });

  it('emptying the log is detected', async () => {
    const p = await auditedProject();
    await truncate(p.log, 0);
    expect(await p.verify()).toBe(1);
  });

  it('deleting the log (or the whole .capsule folder) is detected', async () => {
    const p = await auditedProject();
    await rm(p.log);
    expect(await p.verify()).toBe(1);
    await rm(path.join(p.root, '.capsule'), { recursive: true, force: true });
    expect(await p.verify()).toBe(1);
  });

  it('after a deletion, calls are recorded in a new chain that keeps reporting the loss', async () => {
    // A fresh checkout at the same path looks like this too: it must not lock the project up, and
    // an attacker who deletes the log must not get a clean log back by making more calls.
    const p = await auditedProject();
    await rm(path.join(p.root, '.capsule'), { recursive: true, force: true });
    expect(await p.exec('touch marker', 'run_command:touch')).toBe(0);
    expect(existsSync(path.join(p.root, 'marker'))).toBe(true);
    await p.exec('touch refused-again');
    expect(await p.verify()).toBe(1);
    const json = await cli(['audit', 'verify', '--json'], { cwd: p.root, env: p.env });
    expect(JSON.parse(json.stdout)).toMatchObject({ ok: false, kind: 'restarted' });
    expect(await lines(p.log)).toHaveLength(3);
  });

  it('a rewritten log with every hash recomputed is detected', async () => {
    const p = await auditedProject();
    const records = (await lines(p.log)).map((l) => JSON.parse(l) as Record<string, unknown>);
    (records[1] as Record<string, unknown>).decision = 'allow';
    await writeFile(p.log, forgeChain(records));
    expect(await p.verify()).toBe(1);
    // The same with one record dropped and the chain renumbered.
    await writeFile(p.log, forgeChain(records.filter((_, i) => i !== 2)));
    expect(await p.verify()).toBe(1);
  });

  it('reordered lines are detected', async () => {
    const p = await auditedProject();
    const l = await lines(p.log);
    [l[1], l[2]] = [l[2] as string, l[1] as string];
    await writeFile(p.log, `${l.join('\n')}\n`);
    expect(await p.verify()).toBe(1);
  });

  it('a line with a duplicated key (what grep shows is not what the hash covered) is detected', async () => {
    const p = await auditedProject();
    const l = await lines(p.log);
    // Placed just before the real key: JSON.parse keeps "deny" in the same place, so a hash of the
    // parsed record matches, while grep and a reader see "allow".
    l[1] = (l[1] as string).replace('"decision":"deny"', '"decision":"allow","decision":"deny"');
    expect(l[1]).toContain('"decision":"allow"');
    await writeFile(p.log, `${l.join('\n')}\n`);
    expect(await p.verify()).toBe(1);
    // Even when the forger recomputes the hash over the exact bytes they wrote.
    const original = await lines(p.log);
    const body = (original[1] as string).replace(/,"hash":"[0-9a-f]{64}"\}$/, '}');
    const hash = createHash('sha256').update(body).digest('hex');
    original[1] = `${body.slice(0, -1)},"hash":"${hash}"}`;
    await writeFile(p.log, `${original.join('\n')}\n`);
    expect(await p.verify()).toBe(1);
  });

  it('non-canonical lines are detected: extra spaces, another key order, escaped letters', async () => {
    const variants: Array<(line: string) => string> = [
      (line) => line.replace(/":"/, '": "'),
      (line) => {
        const { seq, ...rest } = JSON.parse(line) as Record<string, unknown>;
        return JSON.stringify({ ...rest, seq });
      },
      (line) => line.replace('"tool":"run_command"', '"tool":"run\\u005fcommand"'),
      (line) => ` ${line}`,
      (line) => `\uFEFF${line}`,
      (line) => line.replace('"tool"', '"\\u0074ool"'),
    ];
    for (const [i, change] of variants.entries()) {
      const p = await auditedProject(3);
      const l = await lines(p.log);
      const changed = change(l[1] as string);
      expect(changed, `variant ${i}`).not.toBe(l[1]);
      l[1] = changed;
      await writeFile(p.log, `${l.join('\n')}\n`);
      expect([i, await p.verify()]).toEqual([i, 1]);
    }
  });

  it('CRLF line ends are detected', async () => {
    const p = await auditedProject();
    const l = await lines(p.log);
    await writeFile(p.log, `${l.join('\r\n')}\r\n`);
    expect(await p.verify()).toBe(1);
  });

  it('a trailing partial line is reported as torn, and the next append repairs it in the chain', async () => {
    const p = await auditedProject();
    const l = await lines(p.log);
    // What a crash in the middle of an append leaves: the start of a record, no newline.
    await writeFile(p.log, `${l.join('\n')}\n${(l[0] as string).slice(0, 40)}`);
    const json = await cli(['audit', 'verify', '--json'], { cwd: p.root, env: p.env });
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toMatchObject({ ok: false, kind: 'torn', records: 4 });
    // A record whose final newline is missing is torn too.
    await writeFile(p.log, l.join('\n'));
    expect(await p.verify()).toBe(1);
    // The next decision removes the torn bytes, records that it did, and the chain verifies again.
    await writeFile(p.log, `${l.join('\n')}\n${(l[0] as string).slice(0, 40)}`);
    expect(await p.exec('touch again')).toBe(77);
    expect(await p.verify()).toBe(0);
    const after = await lines(p.log);
    expect(after).toHaveLength(6);
    expect(after[4]).toContain('torn');
  });

  it('a broken chain is never extended: the next call fails closed and runs nothing', async () => {
    const p = await auditedProject();
    const l = await lines(p.log);
    await writeFile(p.log, `${l.slice(0, -1).join('\n')}\n`);
    expect(await p.exec(`touch marker`, 'run_command:touch')).not.toBe(0);
    expect(existsSync(path.join(p.root, 'marker'))).toBe(false);
    expect(await p.verify()).toBe(1);
  });

  it('capsule audit reset moves a broken log aside and starts a new anchored chain', async () => {
    const p = await auditedProject();
    await rm(p.log);
    expect(await p.verify()).toBe(1);
    const reset = await cli(['audit', 'reset'], { cwd: p.root, env: p.env });
    expect(reset.code).toBe(0);
    expect(await p.verify()).toBe(0);
    expect(await p.exec(`touch marker`, 'run_command:touch')).toBe(0);
    expect(existsSync(path.join(p.root, 'marker'))).toBe(true);
    expect(await p.verify()).toBe(0);
  });
});

describe('a head inside the project', () => {
  it('verify warns when the state directory lies inside the project root', async () => {
    const { root } = await tempProject('capsule-audit-');
    await writeFile(path.join(root, 'capsule.json'), '{"schemaVersion": 1}');
    const env = { ...process.env, XDG_STATE_HOME: path.join(root, 'state') };
    await cli(['exec', '--no-prompt', '--', 'touch x'], { cwd: root, env });
    const r = await cli(['audit', 'verify'], { cwd: root, env });
    expect(r.code).toBe(0);
    expect(r.stderr).toContain('inside the project');
  });
});
