// A capability of the repository (root/capabilities/NAME) as a runner takes it, built from its manifest
// without the registry: `edit` may change the manifest document before it is parsed.
import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';

export async function benchCapability(root, name, edit) {
  const { parseManifest } = await import('../dist/manifest/parse.js');
  const dir = await realpath(path.join(root, 'capabilities', name));
  const manifestPath = path.join(dir, 'capability.json');
  const text = await readFile(manifestPath, 'utf8');
  const parsed = parseManifest(edit === undefined ? text : JSON.stringify(edit(JSON.parse(text))));
  if (!parsed.ok) throw new Error(`${name}: ${JSON.stringify(parsed.issues)}`);
  return {
    name,
    environment: parsed.manifest.environment,
    manifest: parsed.manifest,
    dir,
    manifestPath,
    entryPath: path.join(dir, parsed.manifest.entry),
    contentHash: 'sha256:bench',
    root: path.dirname(dir),
    fsGrants: [],
  };
}
