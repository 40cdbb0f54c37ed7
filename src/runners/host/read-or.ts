import { readFileSync } from 'node:fs';

/** A file's text, or `fallback` when it cannot be read (a /proc or cgroup file that is not there). */
export function readOr(file: string, fallback = ''): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return fallback;
  }
}
