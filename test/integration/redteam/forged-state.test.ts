import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { projectConfigSchema } from '../../../src/project/project-config.js';
import { policyHash, policyViewOf } from '../../../src/permissions/policy-diff.js';
import { tempProject, writeCapability, writeManifestText } from '../../helpers/capability.js';
import { BUILT_CLI, cli } from '../../helpers/cli.js';
import { settledFor } from '../../helpers/eventually.js';
import { assemble } from '../runners/wasm/helpers.js';

// Host code running as the same user but outside capsule (or a confined command that found a way to
// write the state folder) rewrites what capsule trusts on disk: the confirmed-policy snapshot, the
// audit log with its head, the scan index. It can compute every plain hash capsule uses; it cannot
// read the per-user key. Judged by effect: a marker file a denied shell capability would create, and
// canary bytes a sandboxed capability would print once a widened capsule.json is in effect.

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the CLI integration tests');
});

const probe = assemble('probe.wat');
const CANARY = 'canary-5c1e9b';

/** What a person confirms: `mark` (host code) is never to run. */
const NARROW = { schemaVersion: 1, permissions: { deny: ['run_capability(mark)'] } };
/** What the attacker wants in effect. */
const WIDE = { schemaVersion: 1, mode: 'bypass', permissions: { allow: ['run_capability(*)'] } };

interface Project {
  root: string;
  state: string;
  env: NodeJS.ProcessEnv;
}

async function project(state?: string): Promise<Project> {
  const { root, capRoot } = await tempProject('capsule-forged-');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify(NARROW));
  await writeCapability(capRoot, 'mark', {}, { 'run.sh': `touch ${path.join(root, 'MARKER')}\n` });
  await writeCapability(
    capRoot,
    'peek',
    {
      description: 'prints a file of the folder it may read',
      environment: 'wasm',
      entry: 'probe.wasm',
      interpreter: undefined,
      args: ['read', 'canary'],
      grants: { fs: [{ path: 'data', mode: 'ro' }] },
    },
    { 'probe.wasm': probe },
  );
  await mkdir(path.join(root, 'data'));
  await writeFile(path.join(root, 'data', 'canary'), CANARY);
  const stateDir = state ?? (await mkdtemp(path.join(tmpdir(), 'capsule-forged-state-')));
  return { root, state: stateDir, env: { ...process.env, CAPSULE_STATE_DIR: stateDir } };
}

/** A person confirms the policy on disk with `capsule reload` in a terminal (script(1)). */
async function confirm(p: Project): Promise<void> {
  const r = await execa('script', ['-qec', `node ${BUILT_CLI} reload`, '/dev/null'], {
    cwd: p.root,
    env: p.env,
    reject: false,
    input: 'y\n',
    timeout: 60_000,
  });
  expect(r.exitCode, r.stdout).toBe(0);
}

const capsule = (p: Project, args: string[]) => cli(args, { cwd: p.root, env: p.env });

/** What the widened policy would let happen: the host capability runs, the sandboxed one prints. */
async function attempts(p: Project): Promise<{ marker: boolean; leaked: boolean }> {
  const mark = await capsule(p, ['run', 'mark', '--grant', 'run_capability:mark', '--no-prompt']);
  const peek = await capsule(p, ['run', 'peek', '--no-prompt']);
  return {
    marker: existsSync(path.join(p.root, 'MARKER')) || mark.code === 0,
    leaked: peek.stdout.includes(CANARY),
  };
}

async function snapshotFile(state: string): Promise<string> {
  const files = (await readdir(path.join(state, 'policy'))).filter((f) => f.endsWith('.json'));
  expect(files).toHaveLength(1);
  return path.join(state, 'policy', files[0] as string);
}

const wideView = () => policyViewOf(projectConfigSchema.parse(WIDE));

/** The forgeries of a snapshot: each leaves A's snapshot file claiming WIDE was confirmed. */
const forgeries: Array<[string, (a: Project) => Promise<void>]> = [
  [
    'the plain sha256 recomputed over the widened policy',
    async (a) => {
      const file = await snapshotFile(a.state);
      const snap = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
      const policy = wideView();
      await writeFile(file, JSON.stringify({ ...snap, policy, hash: policyHash(policy) }, null, 2));
    },
  ],
  [
    'a snapshot as an earlier version wrote it (no MAC)',
    async (a) => {
      const file = await snapshotFile(a.state);
      const snap = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
      const policy = wideView();
      const legacy = {
        schemaVersion: 1,
        root: snap.root,
        hash: policyHash(policy),
        policy,
        profileTexts: {},
        confirmedAt: snap.confirmedAt,
        by: 'capsule reload',
      };
      await writeFile(file, JSON.stringify(legacy, null, 2));
    },
  ],
  [
    'a valid snapshot of another project in the same state folder, its root rewritten',
    async (a) => {
      const b = await project(a.state);
      await writeFile(path.join(b.root, 'capsule.json'), JSON.stringify(WIDE));
      const mine = await snapshotFile(a.state);
      await confirm(b);
      const theirs = (await readdir(path.join(a.state, 'policy')))
        .map((f) => path.join(a.state, 'policy', f))
        .find((f) => f !== mine && f.endsWith('.json')) as string;
      const snap = JSON.parse(await readFile(theirs, 'utf8')) as Record<string, unknown>;
      await writeFile(mine, JSON.stringify({ ...snap, root: a.root }, null, 2));
    },
  ],
  [
    'a valid snapshot of the same project from another state folder',
    async (a) => {
      const other: Project = { ...a, state: await mkdtemp(path.join(tmpdir(), 'capsule-forged-other-')) };
      other.env = { ...a.env, CAPSULE_STATE_DIR: other.state };
      await confirm(other); // capsule.json is WIDE by now
      await copyFile(await snapshotFile(other.state), await snapshotFile(a.state));
    },
  ],
];

describe('red team: a forged confirmed-policy snapshot is not a confirmation', () => {
  it.each(forgeries)(
    '%s: the widened capsule.json stays pending',
    async (_name, forge) => {
      const a = await project();
      await confirm(a);
      expect(await attempts(a)).toEqual({ marker: false, leaked: false });
      await writeFile(path.join(a.root, 'capsule.json'), JSON.stringify(WIDE));
      await forge(a);
      expect(await attempts(a)).toEqual({ marker: false, leaked: false });
      // The report names it and says what to do: the run's (--json) ...
      const run = await capsule(a, ['run', 'peek', '--no-prompt', '--json']);
      expect(run.code).toBe(78);
      const err = (JSON.parse(run.stdout) as { error: { code: string; file: string; hint: string } }).error;
      expect(err).toMatchObject({
        code: 'CONFIG_INVALID',
        file: path.join(
          a.state,
          'policy',
          `${createHash('sha256').update(a.root).digest('hex').slice(0, 32)}.json`,
        ),
      });
      expect(err.hint).toContain('capsule reload');
      // ... and capsule reload's.
      const reload = await capsule(a, ['reload', '--json', '--no-prompt']);
      expect(reload.code).toBe(77);
      const out = JSON.parse(reload.stdout) as { confirmed: boolean; untrusted?: { kind: string } };
      expect(out.confirmed).toBe(false);
      expect(out.untrusted?.kind).toBe(_name.includes('earlier version') ? 'unauthenticated' : 'forged');
      // A person's confirmation replaces the forgery, and then (only then) the policy is in effect.
      await confirm(a);
      expect(await attempts(a)).toEqual({ marker: true, leaked: true });
    },
    120_000,
  );

  it('a forgery of the default policy (erasing a confirmed deny rule) is not re-established by any command', async () => {
    const a = await project();
    await confirm(a);
    await writeFile(path.join(a.root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
    const file = await snapshotFile(a.state);
    const snap = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    const policy = policyViewOf(projectConfigSchema.parse({}));
    await writeFile(file, JSON.stringify({ ...snap, policy, hash: policyHash(policy) }));
    const forged = await readFile(file, 'utf8');
    for (const args of [['reload', '--no-prompt'], ['reload'], ['reload', '--json']]) {
      expect((await capsule(a, args)).code).toBe(77);
    }
    expect(await readFile(file, 'utf8')).toBe(forged);
    expect((await attempts(a)).marker).toBe(false);
    // A person who looks and says yes drops the deny rule for real.
    await confirm(a);
    expect((await attempts(a)).marker).toBe(true);
  }, 120_000);

  it('control: the same widening confirmed by a person is in effect', async () => {
    const a = await project();
    await confirm(a);
    await writeFile(path.join(a.root, 'capsule.json'), JSON.stringify(WIDE));
    expect(await attempts(a)).toEqual({ marker: false, leaked: false });
    await confirm(a);
    expect(await attempts(a)).toEqual({ marker: true, leaked: true });
  }, 120_000);
});

/** Rewrite a log the way capsule writes it, every hash recomputed (what any reader of the code can do). */
function rechain(lines: Array<Record<string, unknown>>): { text: string; last: string } {
  let prev = '0'.repeat(64);
  const out: string[] = [];
  for (const [seq, record] of lines.entries()) {
    const { hash: _old, ...body } = { ...record, seq, prev } as Record<string, unknown>;
    const text = JSON.stringify(body);
    const hash = createHash('sha256').update(text).digest('hex');
    out.push(`${text.slice(0, -1)},"hash":"${hash}"}`);
    prev = hash;
  }
  return { text: `${out.join('\n')}\n`, last: prev };
}

async function headFile(state: string, root: string): Promise<string> {
  const id = createHash('sha256').update(root).digest('hex').slice(0, 32);
  return path.join(state, 'audit-heads', `${id}.json`);
}

async function records(root: string): Promise<Array<Record<string, unknown>>> {
  const text = await readFile(path.join(root, '.capsule', 'audit.jsonl'), 'utf8');
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** capsule.json, the log and the head rewritten together: every denial now reads as an allow. */
async function consistentForgery(a: Project, head: (h: Record<string, unknown>) => object): Promise<void> {
  await writeFile(path.join(a.root, 'capsule.json'), JSON.stringify(WIDE));
  const forged = (await records(a.root)).map((r) =>
    r.decision === 'deny' ? { ...r, decision: 'allow', source: 'allow-rule' } : r,
  );
  const { text, last } = rechain(forged);
  await writeFile(path.join(a.root, '.capsule', 'audit.jsonl'), text);
  const file = await headFile(a.state, a.root);
  const old = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
  const { pending: _p, ...rest } = old;
  await writeFile(file, JSON.stringify(head({ ...rest, records: forged.length, lastHash: last })));
}

const verify = async (a: Project) => {
  const r = await capsule(a, ['audit', 'verify', '--json']);
  return { code: r.code, out: JSON.parse(r.stdout) as { ok: boolean; kind?: string; problem?: string } };
};

describe('red team: a consistent forgery of capsule.json, the audit log and its head', () => {
  async function decided(): Promise<Project> {
    const a = await project();
    await confirm(a);
    await attempts(a); // two denials on record
    expect((await records(a.root)).filter((r) => r.decision === 'deny').length).toBeGreaterThan(0);
    expect((await verify(a)).code).toBe(0);
    return a;
  }

  it('head recomputed (its MAC kept or dropped): verify exits 1 naming the forgery', async () => {
    for (const keepMac of [true, false]) {
      const a = await decided();
      await consistentForgery(a, (h) => (keepMac ? h : { ...h, mac: undefined }));
      const v = await verify(a);
      expect(v.code).toBe(1);
      expect(v.out).toMatchObject({ ok: false, kind: 'forged' });
      // Nothing is chained onto it: a later decision fails instead of vouching for the forgery.
      const run = await capsule(a, ['run', 'peek', '--no-prompt']);
      expect(run.stdout).not.toContain(CANARY);
      expect((await verify(a)).code).toBe(1);
      // A person looks, then re-establishes the head.
      expect((await capsule(a, ['audit', 'reset'])).code).toBe(0);
      expect((await verify(a)).code).toBe(0);
    }
  }, 120_000);

  it('a head as an earlier version wrote it (no MAC): verify exits 1, unauthenticated', async () => {
    const a = await decided();
    await consistentForgery(a, (h) => {
      const { mac: _mac, ...rest } = h as { mac?: string };
      return { ...rest, schemaVersion: 1 };
    });
    const v = await verify(a);
    expect(v.code).toBe(1);
    expect(v.out).toMatchObject({ ok: false, kind: 'unauthenticated' });
  }, 120_000);

  it('the log and valid head of another project copied in: verify exits 1', async () => {
    const a = await decided();
    const b = await project(a.state);
    await capsule(b, ['run', 'peek', '--no-prompt']);
    await writeFile(path.join(a.root, 'capsule.json'), JSON.stringify(WIDE));
    await copyFile(
      path.join(b.root, '.capsule', 'audit.jsonl'),
      path.join(a.root, '.capsule', 'audit.jsonl'),
    );
    await copyFile(await headFile(b.state, b.root), await headFile(a.state, a.root));
    const v = await verify(a);
    expect(v.code).toBe(1);
    expect(v.out).toMatchObject({ ok: false, kind: 'forged' });
  }, 120_000);
});

describe('red team: a forged scan-index entry', () => {
  it('does not make a changed capability read as the approved one', async () => {
    const a = await project();
    const dir = path.join(a.root, 'capabilities', 'peek');
    // The index remembers only folders whose files settled (2 s).
    await settledFor(dir, 2000);
    const listed = JSON.parse((await capsule(a, ['list', '--json'])).stdout) as {
      capabilities: Array<{ name: string; contentHash: string }>;
    };
    const approved = listed.capabilities.find((c) => c.name === 'peek')?.contentHash as string;
    const indexDir = path.join(a.state, 'registry-index');
    const [indexName] = await readdir(indexDir);
    const indexFile = path.join(indexDir, indexName as string);
    const index = JSON.parse(await readFile(indexFile, 'utf8')) as {
      folders: Record<string, { files: string[]; stamps: string[]; contentHash: string }>;
    };
    const entry = index.folders[dir];
    expect(entry?.contentHash).toBe(approved);
    await writeFile(
      path.join(a.root, 'capsule.json'),
      JSON.stringify({
        ...NARROW,
        allowlist: { 'run_capability:peek': { level: 'AlwaysThisProject', contentHash: approved } },
      }),
    );
    const flags = async (): Promise<string[]> => {
      const r = JSON.parse((await capsule(a, ['grants', 'list', '--json'])).stdout) as {
        entries: Array<{ key: string; flags: string[] }>;
      };
      return r.entries.find((e) => e.key === 'run_capability:peek')?.flags ?? [];
    };
    expect(await flags()).not.toContain('stale');
    // The capability changes; then the attacker records the new stamps under the approved hash.
    const manifest = path.join(dir, 'capability.json');
    await writeManifestText(dir, (await readFile(manifest, 'utf8')).replace('"canary"', '"other"'));
    expect(await flags()).toContain('stale');
    const stamps = (entry?.files ?? []).map((f) => {
      const st = statSync(path.join(dir, f), { bigint: true });
      return `${st.size}:${st.mtimeNs}:${st.ctimeNs}:${st.ino}:${st.mode}`;
    });
    index.folders[dir] = { ...(entry as object), stamps, contentHash: approved } as typeof entry & object;
    await writeFile(indexFile, JSON.stringify(index));
    expect(await flags()).toContain('stale');
    const again = JSON.parse((await capsule(a, ['list', '--json'])).stdout) as typeof listed;
    expect(again.capabilities.find((c) => c.name === 'peek')?.contentHash).not.toBe(approved);
  }, 60_000);
});

describe('red team: from inside a confined command', () => {
  it('the key cannot be read by any name and the snapshot cannot be replaced; the widening stays pending', async () => {
    const a = await project();
    await confirm(a);
    const keyFile = path.join(a.state, 'secret', 'state.key');
    const keyHex = (await readFile(keyFile)).toString('hex');
    const snap = await snapshotFile(a.state);
    const before = await readFile(snap, 'utf8');
    await writeFile(path.join(a.root, 'capsule.json'), JSON.stringify(WIDE));
    const policy = wideView();
    const forged = JSON.stringify({ ...(JSON.parse(before) as object), policy, hash: policyHash(policy) });
    await writeFile(path.join(a.root, 'data', 'forged.json'), forged);
    const script = [
      // Control: the same reading of a file it may read shows its bytes.
      `od -An -tx1 -v ${path.join(a.root, 'data', 'canary')} | tr -d ' \\n'; echo`,
      `od -An -tx1 -v ${keyFile} | tr -d ' \\n'; echo`,
      `od -An -tx1 -v /proc/self/root${keyFile} | tr -d ' \\n'; echo`,
      `find ${a.state} -type f -exec od -An -tx1 -v {} + | tr -d ' \\n'; echo`,
      `cp ${path.join(a.root, 'data', 'forged.json')} ${snap}`,
      `rm -f ${snap}`,
      'true',
    ].join('\n');
    const r = await capsule(a, ['exec', '--mode', 'bypass', '--no-prompt', '--json', '--', script]);
    expect(r.stdout, r.stderr).toContain(Buffer.from(CANARY).toString('hex'));
    expect(r.stdout + r.stderr).not.toContain(keyHex.slice(0, 32));
    expect(await readFile(snap, 'utf8')).toBe(before);
    expect(await attempts(a)).toEqual({ marker: false, leaked: false });
  }, 120_000);
});
