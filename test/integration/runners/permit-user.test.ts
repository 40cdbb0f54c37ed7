import { existsSync } from 'node:fs';
import { chown, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { assemble, wasmCapability } from './wasm/helpers.js';

// The permit attacks of permit.test.ts again, run by an ordinary user: the runner's refusal must not depend on
// the caller being root (as root the host confinement takes another path). Judged by effect: each attack's
// marker file is not there; the control's is.

const NOBODY = 65534;
const asUser = process.getuid?.() === 0;
const ATTACKS = ['control', 'forged', 'copied', 'other', 'reused', 'changed', 'none'] as const;
type Attack = (typeof ATTACKS)[number];
const WHAT: Record<Exclude<Attack, 'control'>, string> = {
  forged: 'a forged permit (an object literal naming the capability and its hash)',
  copied: 'a copy of a genuine permit',
  other: "another capability's permit",
  reused: 'a permit already spent by one run',
  changed: 'a permit for the capability before its content changed',
  none: 'no permit at all',
};

interface Scene {
  kind: 'shell' | 'wasm';
  attack: Attack;
  dir: string;
  root: string;
  capRoot: string;
  marker: string;
}

const probe = assemble('probe.wat');
const roots: string[] = [];

async function scene(kind: 'shell' | 'wasm', attack: Attack): Promise<Scene> {
  const name = `u-${attack}`;
  if (kind === 'shell') {
    const { root, capRoot } = await tempProject('capsule-permit-user-');
    const marker = path.join(root, `${name}.marker`);
    const dir = await writeCapability(capRoot, name, {}, { 'run.sh': `touch '${marker}'\n` });
    return { kind, attack, dir, root, capRoot, marker };
  }
  const made = await wasmCapability(name, probe, {
    manifest: { args: ['write', `${name}.marker`], grants: { fs: [{ path: 'out', mode: 'rw' }] } },
    projectFiles: { 'out/.keep': '' },
  });
  return {
    kind,
    attack,
    dir: made.capability.dir,
    root: made.root,
    capRoot: path.join(made.root, 'capabilities'),
    marker: path.join(made.root, 'out', `${name}.marker`),
  };
}

async function chownTree(dir: string): Promise<void> {
  await chown(dir, NOBODY, NOBODY);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) await chownTree(p);
    else await chown(p, NOBODY, NOBODY);
  }
}

/** Runs every scene in one process of the ordinary user; returns, per scene, the error code it got (or 'ran'). */
async function attackAsUser(scenes: Scene[], work: string): Promise<Record<string, string>> {
  const dist = (p: string) => JSON.stringify(path.join(REPO_ROOT, 'dist', p));
  const driver = path.join(work, 'driver.mjs');
  await writeFile(
    driver,
    `import { writeFile } from 'node:fs/promises';
const { ShellRunner } = await import(${dist('runners/shell-runner.js')});
const { WasmRunner } = await import(${dist('runners/wasm/wasm-runner.js')});
const { mintRunnerPermit } = await import(${dist('runners/permit.js')});
const { loadCapability } = await import(${dist('manifest/load.js')});
const { InputValidator } = await import(${dist('manifest/input.js')});
const scenes = ${JSON.stringify(scenes)};
const runners = { shell: new ShellRunner(), wasm: new WasmRunner({ poolSize: 1 }) };
const load = async (s) => {
  const r = await loadCapability(s.dir, { root: s.capRoot, projectRoot: s.root,
    protectedPaths: [s.root + '/capsule.json'], inputValidator: new InputValidator() });
  if (!r.ok) throw new Error(JSON.stringify(r.invalid.issues));
  return r.capability;
};
const out = {};
for (const s of scenes) {
  const runner = runners[s.kind];
  const capability = await load(s);
  let permit = mintRunnerPermit(capability);
  if (s.attack === 'forged') permit = { capability: capability.name, contentHash: capability.contentHash };
  if (s.attack === 'copied') permit = { ...permit };
  if (s.attack === 'none') permit = undefined;
  if (s.attack === 'other') permit = mintRunnerPermit({ ...capability, name: 'another' });
  if (s.attack === 'reused') await runner.run({ capability, input: '{}' }, permit).then(() => import('node:fs').then((fs) => fs.rmSync(s.marker)));
  if (s.attack === 'changed') {
    await writeFile(s.dir + '/added.txt', 'changed after the permit\\n');
    const after = await load(s);
    capability.contentHash = after.contentHash;
  }
  try {
    await runner.run({ capability, input: '{}' }, permit);
    out[s.kind + ':' + s.attack] = 'ran';
  } catch (e) {
    out[s.kind + ':' + s.attack] = e.code ?? String(e);
  }
}
await Promise.all(Object.values(runners).map((r) => r.close()));
process.stdout.write(JSON.stringify({ uid: process.getuid(), out }));
`,
  );
  if (asUser) await chownTree(work);
  const argv = asUser
    ? ['setpriv', '--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', 'node', driver]
    : ['node', driver];
  const r = await execa(argv[0] as string, argv.slice(1), {
    cwd: work,
    reject: false,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: work, TMPDIR: work },
  });
  if (r.exitCode !== 0) throw new Error(`driver failed: ${r.stderr}`);
  const parsed = JSON.parse(r.stdout) as { uid: number; out: Record<string, string> };
  expect(parsed.uid).not.toBe(0);
  return parsed.out;
}

describe('runner permits hold for an ordinary user (not root)', () => {
  const scenes: Scene[] = [];
  let results: Record<string, string> = {};

  beforeAll(async () => {
    for (const kind of ['shell', 'wasm'] as const) {
      for (const attack of ATTACKS) scenes.push(await scene(kind, attack));
    }
    const { root: work } = await tempProject('capsule-permit-user-work-');
    roots.push(work, ...scenes.map((s) => s.root));
    // The ordinary user owns every scene, so only the permit can stop a run.
    if (asUser) for (const s of scenes) await chownTree(s.root);
    results = await attackAsUser(scenes, work);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(roots.map((r) => rm(r, { recursive: true, force: true })));
  });

  for (const kind of ['shell', 'wasm'] as const) {
    it(`${kind}: control — a permit minted for the capability runs it as the user (the marker is created)`, () => {
      const s = scenes.find((x) => x.kind === kind && x.attack === 'control') as Scene;
      expect(results[`${kind}:control`]).toBe('ran');
      expect(existsSync(s.marker)).toBe(true);
    });
    for (const attack of Object.keys(WHAT) as Array<keyof typeof WHAT>) {
      it(`${kind}: ${WHAT[attack]} runs nothing`, () => {
        const s = scenes.find((x) => x.kind === kind && x.attack === attack) as Scene;
        expect(results[`${kind}:${attack}`]).toBe('PERMISSION_DENIED');
        expect(existsSync(s.marker)).toBe(false);
      });
    }
  }
});
