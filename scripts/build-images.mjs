#!/usr/bin/env node
// Build capsule's offline sandbox images (runtimes/docker) through capsule's own builder.
// Usage: node scripts/build-images.mjs [--force] [TAG...]   (default: every recipe, skipping current ones)
// Needs the compiled builder in dist/: runs `npm run build` first when it is missing.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const builderJs = path.join(root, 'dist', 'runners', 'docker', 'images.js');
if (!existsSync(builderJs)) {
  const r = spawnSync('npm', ['run', 'build', '--silent'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
const { ImageBuilder, IMAGE_RECIPES } = await import(
  path.join(root, 'dist', 'runners', 'docker', 'images.js')
);
const { DockerodeEngine } = await import(path.join(root, 'dist', 'runners', 'docker', 'dockerode-engine.js'));

const args = process.argv.slice(2);
const force = args.includes('--force');
const wanted = args.filter((a) => a !== '--force');
const engine = new DockerodeEngine({ env: process.env });
const builder = new ImageBuilder({ engine });
const log = (m) => process.stderr.write(`build-images: ${m}\n`);
try {
  for (const recipe of IMAGE_RECIPES) {
    if (wanted.length > 0 && !wanted.includes(recipe.tag)) continue;
    if (force) await builder.build(recipe, log);
    // Builds when missing or built from other inputs (a new host node, an edited Dockerfile).
    else await builder.ensure(recipe.tag, log);
    log(`${recipe.tag}: ready`);
  }
} catch (err) {
  log(err instanceof Error ? err.message : String(err));
  if (err && typeof err === 'object' && 'details' in err && err.details?.hint)
    log(`hint: ${err.details.hint}`);
  process.exit(1);
}
