import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The folder capsule is installed in: the nearest folder above this module holding both capsule's
 * package.json and its runtimes/. Found from this module's location, so it is the same whether the
 * code runs from src/, from the compiled dist/ or from the bundled CLI in dist/cli/ (where the code
 * that asks no longer sits at the depth its source file did).
 */
export function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(path.join(dir, 'package.json')) && existsSync(path.join(dir, 'runtimes'))) return dir;
    const parent = path.dirname(dir);
    // Not reachable from an installed capsule (package.json and runtimes/ ship together).
    if (parent === dir)
      throw new Error(`capsule's package folder is not above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}
