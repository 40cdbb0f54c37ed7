import { realpathSync } from 'node:fs';
import path from 'node:path';

/** True when `child` is `parent` or inside it (both absolute, normalized). */
export function isInside(parent: string, child: string): boolean {
  const rel = path.relative(parent, child);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * Resolve `relative` against `base` following every symlink, and require the real path to stay
 * inside `allowedRoot` (itself a real path). Returns the real path, or an error message.
 */
export function resolveInside(
  base: string,
  relative: string,
  allowedRoot: string,
): { ok: true; realPath: string } | { ok: false; message: string } {
  const joined = path.resolve(base, relative);
  if (!isInside(allowedRoot, joined)) return { ok: false, message: `resolves outside ${allowedRoot}` };
  let real: string;
  try {
    // Synchronous: resolving a path is microseconds of cached lookups, and the registry resolves a
    // capability's paths on every call (a round trip through the thread pool costs more).
    real = realpathSync.native(joined);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return {
      ok: false,
      message: code === 'ENOENT' ? 'does not exist' : `cannot be resolved (${code ?? 'error'})`,
    };
  }
  if (!isInside(allowedRoot, real)) {
    return { ok: false, message: `resolves outside ${allowedRoot} (through a symlink, to ${real})` };
  }
  return { ok: true, realPath: real };
}
