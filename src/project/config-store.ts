import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';
import { writeFileAtomic } from '../base/atomic-write.js';
import { withFileLock, type FileLockOptions } from '../base/file-lock.js';
import { parseProjectConfig, type AllowlistEntryInput, type ProjectConfig } from './project-config.js';

/** Where capsule keeps its own state under the project root (audit log, locks, profiles). */
export const STATE_DIR = '.capsule';

export function configLockPath(configFile: string): string {
  return path.join(path.dirname(configFile), STATE_DIR, 'locks', `${path.basename(configFile)}.lock`);
}

/**
 * Read-modify-write of capsule.json under the cross-process lock: re-read the file fresh, refuse
 * (CONFIG_INVALID, nothing written) if it does not parse, apply `mutate` to the raw JSON object (so
 * unknown formatting choices of the human are the only thing lost), validate the result, then write
 * (unless `mutate` returns false: nothing to change)
 * a temp file in the same folder and rename it over: readers see the old or the new file, never a torn one.
 */
export async function updateProjectConfigFile(
  file: string,
  mutate: (raw: Record<string, unknown>) => boolean | void,
  lock: FileLockOptions = {},
): Promise<ProjectConfig> {
  return withFileLock(
    configLockPath(file),
    async () => {
      let raw: Record<string, unknown>;
      let mode = 0o644;
      let text: string | undefined;
      try {
        text = await readFile(file, 'utf8');
        mode = (await stat(file)).mode & 0o777;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
          throw new CapsuleError(
            'CONFIG_INVALID',
            `${file} cannot be read (${(err as NodeJS.ErrnoException).code}).`,
            {
              file,
            },
            { cause: err },
          );
        }
      }
      if (text === undefined) {
        raw = { schemaVersion: 1 };
      } else {
        parseProjectConfig(text, file); // throws on a broken file: never overwrite what we cannot read
        raw = JSON.parse(text) as Record<string, unknown>;
      }
      if (mutate(raw) === false) return parseProjectConfig(JSON.stringify(raw), file);
      const out = `${JSON.stringify(raw, null, 2)}\n`;
      const config = parseProjectConfig(out, file);
      await writeFileAtomic(file, out, mode);
      return config;
    },
    lock,
  );
}

/** Add or replace one allowlist entry (the human side: prompt answers and `capsule grants`). */
export function setAllowlistEntry(
  file: string,
  key: string,
  entry: AllowlistEntryInput,
): Promise<ProjectConfig> {
  return updateProjectConfigFile(file, (raw) => {
    const current = raw.allowlist;
    const allowlist =
      current !== null && typeof current === 'object' && !Array.isArray(current)
        ? (current as Record<string, unknown>)
        : {};
    allowlist[key] = entry;
    raw.allowlist = allowlist;
  });
}

/**
 * Add rules to `permissions.allow` or `permissions.deny` (the human side: an "always" answer, an
 * import a person confirmed). Rules already there are kept once; returns the ones added. The whole
 * result is validated before anything is written, so a rule that can never match writes nothing.
 */
export async function addPermissionRules(
  file: string,
  additions: { allow?: readonly string[]; deny?: readonly string[] },
): Promise<{ allow: string[]; deny: string[] }> {
  const added = { allow: [] as string[], deny: [] as string[] };
  await updateProjectConfigFile(file, (raw) => {
    const current = raw.permissions;
    const permissions =
      current !== null && typeof current === 'object' && !Array.isArray(current)
        ? (current as Record<string, unknown>)
        : {};
    for (const kind of ['allow', 'deny'] as const) {
      const list = Array.isArray(permissions[kind]) ? [...(permissions[kind] as unknown[])] : [];
      for (const rule of additions[kind] ?? []) {
        if (list.includes(rule) || added[kind].includes(rule)) continue;
        list.push(rule);
        added[kind].push(rule);
      }
      if (added[kind].length > 0) permissions[kind] = list;
    }
    if (added.allow.length === 0 && added.deny.length === 0) return false;
    raw.permissions = permissions;
  });
  return added;
}

/** Remove one allowlist entry; reports whether it was there. */
export async function removeAllowlistEntry(file: string, key: string): Promise<boolean> {
  let found = false;
  await updateProjectConfigFile(file, (raw) => {
    const current = raw.allowlist;
    if (current !== null && typeof current === 'object' && !Array.isArray(current) && key in current) {
      found = true;
      delete (current as Record<string, unknown>)[key];
    }
    return found;
  });
  return found;
}
