import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectConfigSchema } from '../../../src/project/project-config.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { policyChange, policyHash, policyViewOf, tightenOnly } from '../../../src/permissions/policy-diff.js';
import { PolicySnapshotStore, resolveStartingPolicy } from '../../../src/permissions/policy-snapshot.js';
import { StateKey } from '../../../src/project/state-key.js';

function storeAt(stateDir: string): PolicySnapshotStore {
  return new PolicySnapshotStore({ stateDir, key: new StateKey({ stateDir }) });
}

async function confirmedOf(store: PolicySnapshotStore, root: string) {
  const read = await store.load(root);
  return read.state === 'confirmed' ? read.snapshot : undefined;
}
import { createScriptedPrompter, parseAnswer } from '../../../src/permissions/prompter.js';
import { capabilityRequest, commandReq, HASH_A, tempProject } from './helpers.js';

const view = (raw: unknown) => policyViewOf(projectConfigSchema.parse(raw));

describe('policy difference', () => {
  it('names every rule, entry and mode that changed; formatting and grantedAt are not policy', () => {
    const from = view({
      permissions: { allow: ['write_file(docs/**)'] },
      allowlist: { 'run_capability:a': 'Deny' },
    });
    const to = view({
      mode: 'bypass',
      permissions: { allow: ['run_command(*)'], deny: ['run_command(rm *)'] },
      allowlist: { 'run_capability:a': { level: 'AlwaysThisProject', contentHash: HASH_A } },
    });
    expect(policyChange('capsule.json', from, to)?.lines).toEqual([
      '~ mode: default → bypass',
      '+ allow rule run_command(*)',
      '- allow rule write_file(docs/**)',
      '+ deny rule run_command(rm *)',
      `~ allowlist run_capability:a: AlwaysThisProject (${HASH_A})`,
    ]);
    const stamped = view({
      allowlist: { 'run_capability:a': { level: 'Deny', grantedAt: 'now', note: 'x' } },
      permissions: { allow: ['write_file(docs/**)'] },
    });
    expect(policyChange('capsule.json', from, stamped)).toBeUndefined();
  });

  it('a forged line in a rule is escaped in the difference', () => {
    const to = view({ permissions: { allow: ['run_command(x\n~ mode: bypass → plan)'] } });
    const lines = policyChange('capsule.json', view({}), to)?.text.split('\n') ?? [];
    expect(lines.filter((l) => l.trim().startsWith('~ mode'))).toEqual([]);
  });

  it('tightenOnly keeps removals, added denials and a stricter mode, and drops every widening', () => {
    const confirmed = view({
      mode: 'edit',
      permissions: { allow: ['write_file(docs/**)', 'write_file(src/**)'], deny: [] },
      allowlist: { 'run_capability:a': { level: 'AlwaysThisProject', contentHash: HASH_A } },
    });
    const onDisk = view({
      mode: 'plan',
      permissions: { allow: ['write_file(docs/**)', 'run_command(*)'], deny: ['run_command(rm *)'] },
      allowlist: { 'run_capability:a': 'Deny', 'run_capability:b': { level: 'AlwaysThisProject' } },
    });
    expect(tightenOnly(confirmed, onDisk)).toEqual({
      mode: 'plan',
      allow: ['write_file(docs/**)'],
      deny: ['run_command(rm *)'],
      allowlist: { 'run_capability:a': { level: 'Deny' } },
      profiles: {},
    });
    const wider = view({
      mode: 'bypass',
      permissions: { allow: ['write_file(docs/**)', 'write_file(src/**)'] },
    });
    expect(tightenOnly(confirmed, wider).mode).toBe('edit');
  });
});

describe('engines in the policy', () => {
  const a = { type: 'docker', host: 'unix:///run/a.sock' } as const;
  const b = { type: 'docker', host: 'unix:///run/b.sock' } as const;
  const evil = { type: 'docker', host: 'unix:///tmp/evil.sock' } as const;

  it('an added, removed or re-pointed engine is a difference a person is shown', () => {
    const change = policyChange(
      'capsule.json',
      view({ engines: { a, b } }),
      view({ engines: { a: evil, c: b } }),
    );
    expect(change?.lines).toEqual([
      '+ engine c: docker unix:///run/b.sock',
      '- engine b',
      '~ engine a: docker unix:///tmp/evil.sock',
    ]);
    // Key order and a swarm's TLS files are compared as settings, not as text.
    const tls = { type: 'swarm', manager: 'tcp://m:2376', tls: { key: 'k', cert: 'c', ca: 'ca' } } as const;
    expect(
      policyChange('capsule.json', view({ engines: { s: tls } }), view({ engines: { s: { ...tls } } })),
    ).toBe(undefined);
    expect(
      policyChange(
        'capsule.json',
        view({ engines: { s: tls } }),
        view({ engines: { s: { ...tls, tls: { ...tls.tls, ca: 'evil-ca' } } } }),
      )?.lines,
    ).toEqual(['~ engine s: swarm tcp://m:2376 (tls ca evil-ca)']);
  });

  it('tightenOnly drops a removed engine at once and keeps added or changed ones out', () => {
    expect(tightenOnly(view({ engines: { a, b } }), view({ engines: { a } })).engines).toEqual({ a });
    expect(tightenOnly(view({ engines: { a } }), view({ engines: { a, evil } })).engines).toEqual({ a });
    expect(tightenOnly(view({ engines: { a } }), view({ engines: { a: evil } })).engines).toBeUndefined();
    expect(tightenOnly(view({}), view({ engines: { evil } })).engines).toBeUndefined();
  });

  it('a never-confirmed project starts without the engines its file names, and a first-use snapshot leaves them pending', async () => {
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-snap-'));
    const root = await mkdtemp(path.join(tmpdir(), 'capsule-snap-eng-'));
    const store = storeAt(state);
    const config = projectConfigSchema.parse({ schemaVersion: 1, engines: { evil } });
    for (const s of [undefined, store]) {
      const starting = await resolveStartingPolicy({
        projectRoot: root,
        file: 'capsule.json',
        config,
        store: s,
        recordFirstUse: true,
      });
      expect(starting.config.engines).toBeUndefined();
      expect(starting.pending?.lines).toEqual(['+ engine evil: docker unix:///tmp/evil.sock']);
      expect(starting.warning).toMatch(/capsule reload/);
    }
    expect((await confirmedOf(store, root))?.policy.engines).toBeUndefined();
    // Once a person confirms them, they are in effect.
    await store.write(root, policyViewOf(config), 'capsule reload');
    const confirmed = await resolveStartingPolicy({
      projectRoot: root,
      file: 'capsule.json',
      config,
      store,
      recordFirstUse: true,
    });
    expect(confirmed.config.engines).toEqual({ evil });
    expect(confirmed.pending).toBeUndefined();
  });

  it("a person's project grant at a prompt does not carry an unconfirmed engine into the snapshot", async () => {
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-snap-'));
    const { root, file } = await tempProject({ schemaVersion: 1 });
    const store = storeAt(state);
    await store.write(root, view({ schemaVersion: 1 }), 'capsule reload');
    await writeFile(file, JSON.stringify({ schemaVersion: 1, engines: { evil } }));
    const config = projectConfigSchema.parse({ schemaVersion: 1, engines: { evil } });
    const starting = await resolveStartingPolicy({
      projectRoot: root,
      file,
      config,
      store,
      recordFirstUse: true,
    });
    expect(starting.config.engines).toBeUndefined();
    const e = await PermissionEngine.create({
      projectRoot: root,
      config: starting.config,
      snapshots: store,
      prompter: createScriptedPrompter(['AlwaysThisProject']),
      audit: false,
    });
    await e.check(capabilityRequest('w', { sandboxed: true }));
    const after = await confirmedOf(store, root);
    expect(Object.keys(after?.policy.allowlist ?? {})).toEqual(['run_capability:w']);
    expect(after?.policy.engines).toBeUndefined();
  });

  it('a snapshot with engines edited to point elsewhere is refused', async () => {
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-snap-'));
    const root = await mkdtemp(path.join(tmpdir(), 'capsule-snap-eng-'));
    const store = storeAt(state);
    await store.write(root, view({ engines: { a } }), 'test');
    const { file } = await store.fileFor(root);
    const doc = JSON.parse(await readFile(file, 'utf8')) as {
      policy: { engines: Record<string, { host: string }> };
    };
    (doc.policy.engines['a'] as { host: string }).host = evil.host;
    await writeFile(file, JSON.stringify(doc));
    expect(await store.load(root)).toMatchObject({ state: 'untrusted', kind: 'forged' });
  });
});

describe('confirmed policy snapshots', () => {
  it('a snapshot edited or copied to another project is refused, not trusted', async () => {
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-snap-'));
    const a = await mkdtemp(path.join(tmpdir(), 'capsule-snap-a-'));
    const b = await mkdtemp(path.join(tmpdir(), 'capsule-snap-b-'));
    const store = storeAt(state);
    await store.write(a, view({}), 'test');
    expect((await confirmedOf(store, a))?.policy.mode).toBe('default');
    const { file } = await store.fileFor(a);
    const doc = JSON.parse(await readFile(file, 'utf8')) as { policy: { mode: string } };
    doc.policy.mode = 'bypass';
    await writeFile(file, JSON.stringify(doc));
    expect(await store.load(a)).toMatchObject({ state: 'untrusted', kind: 'forged' });
    await store.write(a, view({}), 'test');
    await writeFile((await store.fileFor(b)).file, await readFile(file, 'utf8'));
    expect(await store.load(b)).toMatchObject({ state: 'untrusted', kind: 'forged' });
    // Rewriting the root to b's does not help: the MAC covers it.
    const copy = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    await writeFile(
      (await store.fileFor(b)).file,
      JSON.stringify({ ...copy, root: (await store.fileFor(b)).root }),
    );
    expect(await store.load(b)).toMatchObject({ state: 'untrusted', kind: 'forged' });
    expect(await store.load(a)).toMatchObject({ state: 'confirmed' });
  });

  it("a genuine snapshot read with another state folder's key is forged; one of an earlier capsule is unauthenticated", async () => {
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-snap-'));
    const other = await mkdtemp(path.join(tmpdir(), 'capsule-snap-other-'));
    const root = await mkdtemp(path.join(tmpdir(), 'capsule-snap-a-'));
    await storeAt(other).write(root, view({ mode: 'bypass' }), 'test');
    const theirs = await readFile((await storeAt(other).fileFor(root)).file, 'utf8');
    const store = storeAt(state);
    const { file } = await store.fileFor(root);
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, theirs);
    expect(await store.load(root)).toMatchObject({ state: 'untrusted', kind: 'forged' });
    const { mac: _mac, ...legacy } = JSON.parse(theirs) as Record<string, unknown>;
    await writeFile(file, JSON.stringify({ ...legacy, schemaVersion: 1 }));
    expect(await store.load(root)).toMatchObject({ state: 'untrusted', kind: 'unauthenticated' });
    await writeFile(file, 'not json');
    expect(await store.load(root)).toMatchObject({ state: 'untrusted', kind: 'broken' });
  });

  it('an untrusted snapshot is no confirmation, and not "never confirmed" either: nothing starts on it', async () => {
    const state = await mkdtemp(path.join(tmpdir(), 'capsule-snap-'));
    const { root, file } = await tempProject({ schemaVersion: 1 });
    const store = storeAt(state);
    await store.write(
      root,
      view({ schemaVersion: 1, permissions: { deny: ['run_capability(x)'] } }),
      'capsule reload',
    );
    const wide = { schemaVersion: 1, mode: 'bypass', permissions: { allow: ['run_capability(*)'] } };
    await writeFile(file, JSON.stringify(wide));
    const { file: snap } = await store.fileFor(root);
    const doc = JSON.parse(await readFile(snap, 'utf8')) as Record<string, unknown>;
    const policy = view(wide);
    await writeFile(snap, JSON.stringify({ ...doc, policy, hash: policyHash(policy) }));
    const start = () =>
      resolveStartingPolicy({
        projectRoot: root,
        file,
        config: projectConfigSchema.parse(wide),
        store,
        recordFirstUse: true,
      });
    await expect(start()).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(/not trusted: .*MAC does not verify/),
      details: { file: snap, hint: expect.stringContaining('capsule reload') },
    });
    // Not replaced by a first-use record: it waits for a person.
    expect(await store.load(root)).toMatchObject({ state: 'untrusted', kind: 'forged' });
    // A person's confirmation (what capsule reload writes) is trusted again.
    await store.write(root, policy, 'capsule reload');
    expect((await start()).config.mode).toBe('bypass');
  });
});

describe('engine reload and protected-file checks', () => {
  it('without a confirmer a changed file is reported, audited as not confirmed, and never adopted', async () => {
    const { root, file } = await tempProject({ schemaVersion: 1 });
    const e = await PermissionEngine.create({
      projectRoot: root,
      prompter: createScriptedPrompter([]),
      audit: false,
    });
    await writeFile(file, JSON.stringify({ schemaVersion: 1, permissions: { allow: ['run_command'] } }));
    expect(await e.checkProtectedFiles()).toMatch(/\+ allow rule run_command/);
    // Reported once per change, not at every call.
    expect(await e.checkProtectedFiles()).toBeUndefined();
    expect(await e.reload()).toMatchObject({ changed: true, applied: false });
    expect((await e.check(commandReq('touch'))).outcome).toBe('deny');
  });

  it("capsule's own project grant is not mistaken for tampering", async () => {
    const { root } = await tempProject({ schemaVersion: 1 });
    const e = await PermissionEngine.create({
      projectRoot: root,
      prompter: createScriptedPrompter(['AlwaysThisProject']),
      audit: false,
    });
    await e.check(capabilityRequest('w', { sandboxed: true }));
    expect(await e.checkProtectedFiles()).toBeUndefined();
    expect(await e.reload()).toMatchObject({ changed: false });
  });

  it('explain shows a key denied for this session', async () => {
    const { root } = await tempProject({ schemaVersion: 1 });
    const e = await PermissionEngine.create({
      projectRoot: root,
      prompter: createScriptedPrompter(['DenyThisSession']),
      audit: false,
    });
    expect(e.explain(commandReq('touch')).options).toContain('DenyThisSession');
    await e.check(commandReq('touch'));
    expect(e.explain(commandReq('touch'))).toMatchObject({ outcome: 'deny', source: 'session-deny' });
    expect(parseAnswer('n', ['Once', 'Deny', 'DenyThisSession'])).toBe('DenyThisSession');
  });
});
