import { createHash } from 'node:crypto';
import { mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { parseManifest } from '../../../../src/manifest/parse.js';
import type { Capability, ResolvedFsGrant } from '../../../../src/manifest/types.js';
import { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { ImageBuilder } from '../../../../src/runners/docker/images.js';
import { writeCapability } from '../../../helpers/capability.js';

/** One engine + builder per test file; base images are built once and left in place for later runs. */
export async function dockerForTests(): Promise<{ engine: DockerodeEngine; builder: ImageBuilder }> {
  const engine = new DockerodeEngine({ env: process.env });
  try {
    await engine.ping(5000);
  } catch (err) {
    throw new Error(
      `these tests need a running Docker engine; run scripts/provision-docker.sh first (${(err as Error).message})`,
    );
  }
  const builder = new ImageBuilder({ engine });
  return { engine, builder };
}

/** A Capability for a folder holding capability.json, parsed by the real manifest parser (defaults applied). */
export async function capabilityFrom(dir: string, fsGrants: ResolvedFsGrant[] = []): Promise<Capability> {
  const real = await realpath(dir);
  const manifestPath = path.join(real, 'capability.json');
  const text = await readFile(manifestPath, 'utf8');
  const parsed = parseManifest(text);
  if (!parsed.ok) throw new Error(`${manifestPath}: ${JSON.stringify(parsed.issues)}`);
  const manifest = parsed.manifest;
  return {
    name: manifest.name,
    environment: manifest.environment,
    manifest,
    dir: real,
    manifestPath,
    entryPath: path.join(real, manifest.entry),
    contentHash: `sha256:${createHash('sha256').update(text).update(real).digest('hex')}`,
    root: path.dirname(real),
    fsGrants,
  };
}

export const FIXTURES = fileURLToPath(new URL('../../../../fixtures/docker/', import.meta.url));

export function fixture(name: string): Promise<Capability> {
  return capabilityFrom(path.join(FIXTURES, name));
}

/** Write a throwaway capability folder (removed by the caller) with a manifest and files. */
export async function tempCapability(
  name: string,
  manifest: Record<string, unknown>,
  files: Record<string, string>,
): Promise<{ dir: string; capability: Capability; cleanup: () => Promise<void> }> {
  const parent = await mkdtemp(path.join(tmpdir(), 'capsule-docker-test-'));
  // No entry of its own: the manifest names it.
  const dir = await writeCapability(parent, name, {
    description: 'test capability',
    environment: 'docker',
    entry: undefined,
    docker: { image: 'capsule/busybox:1' },
    ...manifest,
  });
  // As given, no chmod: a test may hand an entry that is not executable.
  for (const [file, text] of Object.entries(files)) await writeFile(path.join(dir, file), text);
  return {
    dir,
    capability: await capabilityFrom(dir),
    cleanup: () => rm(parent, { recursive: true, force: true }),
  };
}

/** Containers carrying this runner-instance label, i.e. still on the engine. */
export async function containersOf(engine: DockerodeEngine, label: string): Promise<number> {
  return (await engine.listContainers([label])).length;
}

/** Containers of `capability` that engine `host` created between `since` (unix seconds) and now: its own event log. */
export async function created(host: string, capability: string, since: number): Promise<number> {
  const r = await execa('docker', [
    '-H',
    host,
    'events',
    '--since',
    String(since),
    '--until',
    String(Math.ceil(Date.now() / 1000) + 1),
    '--filter',
    'type=container',
    '--filter',
    'event=create',
    '--filter',
    `label=capsule.capability=${capability}`,
    '--format',
    '{{.Actor.ID}}',
  ]);
  return r.stdout.split('\n').filter((l) => l.trim() !== '').length;
}
