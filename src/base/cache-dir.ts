import os from 'node:os';
import path from 'node:path';

/**
 * capsule's per-user cache folder: `$XDG_CACHE_HOME/capsule`, else `~/.cache/capsule`. It holds
 * code capsule imports (transpiled components), so it lives outside every project: no capability
 * grant, tool or repository file can reach it. `env` is the environment of this process, passed in
 * by the composition root; `home` is the fallback when HOME is unset.
 */
export function userCacheDir(env: Readonly<Record<string, string | undefined>>, home = os.homedir()): string {
  const xdg = env.XDG_CACHE_HOME;
  // The XDG spec: a relative value is invalid and must be ignored.
  const base =
    xdg !== undefined && xdg !== '' && path.isAbsolute(xdg)
      ? xdg
      : path.join(env.HOME !== undefined && env.HOME !== '' ? env.HOME : home, '.cache');
  return path.join(base, 'capsule');
}
