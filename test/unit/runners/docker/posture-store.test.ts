import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { StateKey } from '../../../../src/project/state-key.js';
import { PostureStore, keptCanary, sameDaemon } from '../../../../src/runners/docker/posture-store.js';
import type { StoredPosture } from '../../../../src/runners/docker/posture-store.js';

const ADDRESS = 'unix:///run/engine-a.sock';

function record(overrides: Partial<StoredPosture> = {}): StoredPosture {
  return {
    address: ADDRESS,
    identity: {
      id: 'ID',
      name: 'host',
      rootDir: '/var/lib/docker',
      serverVersion: '20.10.24',
      host: ADDRESS,
      socket: { path: '/run/engine-a.sock', realPath: '/run/engine-a.sock', dev: 1, ino: 42 },
      canary: keptCanary({}).name,
      config: `sha256:${'a'.repeat(64)}`,
    },
    posture: {
      capEff: '0000000000000000',
      noNewPrivs: 0,
      seccomp: 0,
      uid: 65534,
      interfaces: ['lo'],
      readOnlyRoot: true,
      runtime: 'runc',
    },
    measuredAt: 1_700_000_000_000,
    probe: 'f'.repeat(64),
    ...overrides,
  };
}

async function store(): Promise<{ store: PostureStore; stateDir: string }> {
  const stateDir = await mkdtemp(path.join(tmpdir(), 'capsule-posture-store-'));
  return { store: new PostureStore({ stateDir, key: new StateKey({ stateDir }) }), stateDir };
}

describe('PostureStore', () => {
  it('gives back what it kept (the control for the refusals below)', async () => {
    const { store: s } = await store();
    const r = record();
    await s.save(r);
    expect(await s.load(ADDRESS)).toEqual(r);
  });

  it('ignores a record edited after it was MACed (a weak posture made strong)', async () => {
    const { store: s } = await store();
    await s.save(record());
    const file = s.fileFor(ADDRESS);
    const doc = JSON.parse(await readFile(file, 'utf8')) as Record<string, Record<string, unknown>>;
    doc['posture'] = { ...doc['posture'], noNewPrivs: 1, seccomp: 2 };
    await writeFile(file, JSON.stringify(doc));
    expect(await s.load(ADDRESS)).toBeUndefined();
  });

  it("ignores another address's record put in this address's file", async () => {
    const { store: s } = await store();
    const other = 'unix:///run/engine-b.sock';
    await s.save(record({ address: other }));
    await writeFile(s.fileFor(ADDRESS), await readFile(s.fileFor(other), 'utf8'));
    expect(await s.load(ADDRESS)).toBeUndefined();
  });

  it("ignores a record MACed with another user's key, and one that is not a record", async () => {
    const { store: mine } = await store();
    const { store: theirs } = await store();
    await theirs.save(record());
    await mkdir(mine.dir, { recursive: true });
    await writeFile(mine.fileFor(ADDRESS), await readFile(theirs.fileFor(ADDRESS), 'utf8'));
    expect(await mine.load(ADDRESS)).toBeUndefined();
    await writeFile(mine.fileFor(ADDRESS), '{"schemaVersion":1}');
    expect(await mine.load(ADDRESS)).toBeUndefined();
  });
});

describe('sameDaemon', () => {
  const stored = record().identity;
  const now = { ...stored, socket: { ...stored.socket! } };
  it('the same identity, socket and configuration: the same daemon', () => {
    expect(sameDaemon(stored, now)).toBe(true);
  });
  it.each([
    ['a new socket (dockerd restarted)', { socket: { ...stored.socket!, ino: 43 } }],
    ['another canary', { canary: keptCanary({}).name }],
    ['another configuration', { config: `sha256:${'b'.repeat(64)}` }],
    ['another data root', { rootDir: '/srv/docker' }],
    ['no configuration read', { config: undefined }],
  ])('%s: not the daemon measured', (_why, change) => {
    expect(sameDaemon(stored, { ...now, ...change })).toBe(false);
  });
});
