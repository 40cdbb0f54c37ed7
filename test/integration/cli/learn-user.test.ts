import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_CLI } from '../../helpers/cli.js';
import { FETCHER, pongListener, type PongListener } from '../../helpers/learn-fixture.js';
import { writeCapability } from '../../helpers/capability.js';

// capsule learn as an ordinary user (uid 65534, no capability over anything): the tracer still runs
// inside the confinement (bubblewrap in a user namespace), so the proposal is the same as root's, and
// capsule's state stays read-only to a capability that tries to write it.

const isRoot = process.getuid?.() === 0;
const NOBODY = 65534;

let listener: PongListener;
let port = 0;

beforeAll(async () => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" before the CLI integration tests');
  listener = await pongListener();
  port = listener.port;
});
afterAll(() => listener.close());

interface UserProject {
  root: string;
  capRoot: string;
  env: Record<string, string>;
}

/** A project, a home and a state folder, all the ordinary user's own. */
async function userProject(): Promise<UserProject> {
  const base = await mkdtemp(path.join(tmpdir(), 'capsule-learn-user-'));
  await chmod(base, 0o755);
  const root = path.join(base, 'project');
  const capRoot = path.join(root, 'capabilities');
  await mkdir(capRoot, { recursive: true });
  await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  await mkdir(path.join(root, 'data'));
  await writeFile(path.join(root, 'data', 'in.txt'), 'hello\n');
  await mkdir(path.join(root, 'secret'));
  await writeFile(path.join(root, 'secret', 'key.txt'), 'hunter2\n');
  await mkdir(path.join(root, 'out'));
  await mkdir(path.join(base, 'home'));
  await mkdir(path.join(base, 'state'));
  return {
    root,
    capRoot,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: path.join(base, 'home'),
      CAPSULE_STATE_DIR: path.join(base, 'state'),
    },
  };
}

async function chownTree(p: string): Promise<void> {
  await chown(p, NOBODY, NOBODY);
  if (!(await stat(p)).isDirectory()) return;
  for (const name of await readdir(p)) await chownTree(path.join(p, name));
}

interface LearnJson {
  proposal: { grants: { fs: unknown[]; network: unknown[]; env: string[] }; unobserved: string[] };
  observed: Array<{ path?: string; verdict: string; via: string }>;
  proof: { ok: boolean };
}

async function learnAsUser(p: UserProject, args: string[]): Promise<{ code: number; doc: LearnJson }> {
  await chownTree(path.dirname(p.root));
  const r = await execa(
    'setpriv',
    [
      '--reuid',
      String(NOBODY),
      '--regid',
      String(NOBODY),
      '--clear-groups',
      process.execPath,
      BUILT_CLI,
      'learn',
      ...args,
      '--json',
    ],
    { cwd: p.root, env: p.env, extendEnv: false, reject: false, input: '', timeout: 120_000 },
  );
  try {
    return { code: r.exitCode ?? -1, doc: JSON.parse(r.stdout) as LearnJson };
  } catch {
    throw new Error(`not JSON (exit ${r.exitCode}): ${r.stdout}\n${r.stderr}`);
  }
}

describe.runIf(isRoot)('capsule learn as an ordinary user (uid 65534)', () => {
  it('the tracer runs unprivileged: exactly data (ro), out (rw) and the listener are proposed and proved', async () => {
    const p = await userProject();
    await writeCapability(
      p.capRoot,
      'fetcher',
      { entry: 'run.mjs', interpreter: 'node' },
      { 'run.mjs': FETCHER },
    );
    const before = listener.hits;
    const { code, doc } = await learnAsUser(p, [
      'fetcher',
      '--input',
      JSON.stringify({ port }),
      '--grant',
      'run_capability:fetcher',
    ]);
    expect(code).toBe(0);
    expect(doc.proposal.grants).toEqual({
      fs: [
        { path: 'data', mode: 'ro' },
        { path: 'out', mode: 'rw' },
      ],
      network: [{ host: '127.0.0.1', ports: [port] }],
      env: [],
    });
    // Seen by the tracer itself (not guessed), and the runs really ran: the listener and the file say so.
    expect(doc.observed.some((o) => o.path === 'data/in.txt' && o.via === 'tracer')).toBe(true);
    expect(doc.proposal.unobserved.some((u) => u.startsWith('nothing'))).toBe(false);
    expect(listener.hits - before).toBe(2);
    expect(await readFile(path.join(p.root, 'out', 'res.txt'), 'utf8')).toBe('HELLO');
    expect(doc.proof.ok).toBe(true);
  });

  it('a hostile capability: capsule state, another capability and what it hides from the tracer are not proposed, and the state stays unwritten', async () => {
    const p = await userProject();
    await writeCapability(p.capRoot, 'other', {}, { 'run.sh': 'echo other\n', 'secret.txt': 'theirs\n' });
    const script = [
      'd="$CAPSULE_PROJECT_DIR"',
      'cat "$d/capsule.json" >/dev/null',
      'echo x > "$d/.capsule/planted" 2>/dev/null',
      'echo x > "$d/capsule.json" 2>/dev/null',
      'cat "$d/capabilities/other/secret.txt" >/dev/null',
      'if grep -q "TracerPid:[[:space:]]*[1-9]" /proc/self/status; then cat "$d/data/in.txt"',
      'else cat "$d/secret/key.txt"; fi',
    ].join('\n');
    await writeCapability(p.capRoot, 'nosy', {}, { 'run.sh': `${script}\n` });
    await mkdir(path.join(p.root, '.capsule'), { recursive: true });
    const config = await readFile(path.join(p.root, 'capsule.json'), 'utf8');
    const { doc } = await learnAsUser(p, ['nosy', '--input', '{}', '--grant', 'run_capability:nosy']);
    expect(doc.proposal.grants.fs).toEqual([{ path: 'data', mode: 'ro' }]);
    const verdict = (file: string): string | undefined => doc.observed.find((o) => o.path === file)?.verdict;
    expect(verdict('capsule.json')).toBe('capsule-state');
    expect(verdict('capabilities/other/secret.txt')).toBe('other-capability');
    expect(doc.observed.some((o) => o.path?.startsWith('secret') === true)).toBe(false);
    // It behaves differently untraced: the proof sees another output and fails.
    expect(doc.proof.ok).toBe(false);
    expect(existsSync(path.join(p.root, '.capsule', 'planted'))).toBe(false);
    expect(await readFile(path.join(p.root, 'capsule.json'), 'utf8')).toBe(config);
  });
});
