import { chmod, mkdir, mkdtemp, realpath, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { InputValidator } from '../../src/manifest/input.js';
import { MANIFEST_FILE } from '../../src/project/environments.js';
import { loadCapability } from '../../src/manifest/load.js';
import type { Capability } from '../../src/manifest/types.js';

/** A fresh temporary project: `<tmp>/capabilities/` is its capability root. */
export async function tempProject(prefix = 'capsule-test-'): Promise<{ root: string; capRoot: string }> {
  const root = await realpath(await mkdtemp(path.join(tmpdir(), prefix)));
  const capRoot = path.join(root, 'capabilities');
  await mkdir(capRoot, { recursive: true });
  return { root, capRoot };
}

/**
 * Write a capability folder `<capRoot>/<name>` (manifest merged over shell defaults) and return its path.
 * A manifest key given as undefined is left out (`interpreter: undefined` for a wasm or docker capability);
 * a `name` in `manifest` names the capability apart from its folder.
 */
export async function writeCapability(
  capRoot: string,
  name: string,
  manifest: Record<string, unknown>,
  files: Record<string, string | Uint8Array> = {},
): Promise<string> {
  const dir = path.join(capRoot, name);
  await writeManifest(dir, {
    schemaVersion: 1,
    name,
    description: `test capability ${name}`,
    environment: 'shell',
    entry: 'run.sh',
    interpreter: 'sh',
    ...manifest,
  });
  for (const [file, text] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
    await writeFile(path.join(dir, file), text);
    if (file.endsWith('.sh')) await chmod(path.join(dir, file), 0o755);
  }
  return dir;
}

/**
 * Write `manifest` exactly as given (no defaults) as the capability.json of `dir`, creating the folder: for a
 * manifest a test replaces or tampers with (a grant swapped mid-run, a copied folder). Returns the file.
 */
export async function writeManifest(dir: string, manifest: Record<string, unknown>): Promise<string> {
  return writeManifestText(dir, JSON.stringify(manifest, null, 2));
}

/** Write `text` as the capability.json of `dir`, byte for byte: for tests of a broken or hostile manifest. */
export async function writeManifestText(dir: string, text: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, MANIFEST_FILE);
  await writeFile(file, text);
  return file;
}

/** Write and load a capability; throws with the issues when it is invalid. */
export async function makeCapability(
  name: string,
  script: string,
  manifest: Record<string, unknown> = {},
  files: Record<string, string> = {},
): Promise<{ capability: Capability; root: string }> {
  const { root, capRoot } = await tempProject();
  const dir = await writeCapability(capRoot, name, manifest, { 'run.sh': script, ...files });
  return { capability: await loadValid(dir, root, capRoot), root };
}

/** Load a capability folder of a temp project; throws with the issues when it is invalid. */
export async function loadValid(dir: string, root: string, capRoot: string): Promise<Capability> {
  const loaded = await loadCapability(dir, {
    root: capRoot,
    projectRoot: root,
    protectedPaths: [path.join(root, 'capsule.json')],
    inputValidator: new InputValidator(),
  });
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.invalid.issues));
  return loaded.capability;
}
