import type { Stats } from 'node:fs';

/**
 * Whether `info` (from lstat) is a real folder of `uid` that no one else may enter: capsule keeps run
 * files under fixed names in the shared temp folder, and a folder planted under such a name by another
 * user would be theirs to read or rewrite. Without a uid (no POSIX ids) only the type and mode count.
 */
export function isPrivateFolder(info: Stats, uid: number | undefined): boolean {
  return info.isDirectory() && (uid === undefined || info.uid === uid) && (info.mode & 0o077) === 0;
}
