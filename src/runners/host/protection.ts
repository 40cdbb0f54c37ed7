import { chownSync, existsSync, lstatSync, mkdirSync, readdirSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../../base/package-root.js';
import type { HostProtection } from '../../project/protected-state.js';
import { readOr } from './read-or.js';

/** What a confined run may not change or see, resolved against this machine's mounts and links. */

export const NO_PROTECTION: HostProtection = { readOnly: [], hidden: [] };

/** The directories from `/` down to (excluding) p, outermost first. */
export function ancestors(p: string): string[] {
  const out: string[] = [];
  for (let dir = path.dirname(p); dir !== path.dirname(dir); dir = path.dirname(dir)) out.unshift(dir);
  return out;
}

export const inside = (p: string, dir: string): boolean => p === dir || p.startsWith(dir + path.sep);

/** The paths that exist, outermost only (a path inside another is covered by it). */
function outermost(paths: readonly string[]): string[] {
  const existing = [...new Set(paths.map((p) => path.resolve(p)))].filter((p) => existsSync(p)).sort();
  return existing.filter((p, i) => !existing.slice(0, i).some((q) => inside(p, q)));
}

/** A run's protected paths as bound: read-only, hidden, daemon sockets covered, link folders pinned. */
export interface RunProtection {
  readOnly: string[];
  hidden: string[];
  sockets: string[];
  pins: LinkPin[];
}

/** The protection a run gets: hidden paths win over read-only ones inside them. */
export function effectiveProtection(p: HostProtection, own: readonly string[]): RunProtection {
  // A read-only folder that is not there yet is made first: one the run could create would be its own.
  for (const dir of p.madeFolders ?? []) {
    try {
      mkdirSync(dir);
      // Made by capsule as root in someone's project: theirs, like the folder it is in.
      const parent = statSync(path.dirname(dir));
      if (process.getuid?.() === 0 && parent.uid !== 0) chownSync(dir, parent.uid, parent.gid);
    } catch {
      // There already (then bound as it is), or not makeable by capsule, so not by the run either.
    }
  }
  const mounts = ownMounts();
  const withAliases = (paths: readonly string[]): string[] =>
    paths.flatMap((q) => [q, ...aliasesOf(path.resolve(q), mounts)]);
  const hidden = outermost(withAliases(p.hidden));
  // capsule's own code is what the next capsule process runs: no command changes it.
  // A link on the way to capsule's own code (a checkout whose node_modules is a symlink) is bound at its
  // target, and the folder holding the link is pinned like any other protected path's.
  const readOnly = outermost(withAliases([...p.readOnly, ...own.map(realOr)])).filter(
    (r) => !hidden.some((h) => inside(r, h)),
  );
  const covered = (s: string): boolean => [...hidden, ...readOnly].some((d) => inside(s, d));
  return {
    readOnly,
    hidden,
    sockets: listeningSockets().filter((s) => !covered(s)),
    pins: linkPins([...p.readOnly, ...p.hidden, ...own]),
  };
}

function realOr(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

/** A folder holding a symlink on the way to a protected path: read-only, its other entries writable. */
export interface LinkPin {
  dir: string;
  writable: string[];
}

/**
 * The folders that hold a symlink on the way to a protected path. A command that could re-point the link
 * would make the next capsule read a state folder of its making, so the folder is read-only for the run
 * (no entry in it can be replaced or added) while its existing entries other than links stay writable.
 */
function linkPins(paths: readonly string[]): LinkPin[] {
  const dirs = new Set<string>();
  for (const p of paths) {
    let at = '/';
    for (const part of path.resolve(p).split('/').filter(Boolean)) {
      const next = path.join(at, part);
      let link: boolean;
      try {
        link = lstatSync(next).isSymbolicLink();
      } catch {
        break;
      }
      if (!link) {
        at = next;
        continue;
      }
      dirs.add(at);
      try {
        at = realpathSync(next);
      } catch {
        break;
      }
    }
  }
  return [...dirs].sort().map((dir) => {
    const writable: string[] = [];
    try {
      for (const name of readdirSync(dir)) {
        const entry = path.join(dir, name);
        if (!lstatSync(entry).isSymbolicLink()) writable.push(entry);
      }
    } catch {
      // unreadable: the folder is read-only whole
    }
    return { dir, writable };
  });
}

/** The files of capsule itself: its package's code and dependencies, and the node binary running it. */
export function ownCode(): string[] {
  const out: string[] = [];
  try {
    out.push(realpathSync(process.execPath));
    const root = packageRoot();
    for (const part of ['dist', 'node_modules']) {
      // Linked in (a workspace, a shared node_modules): the place the link leads is what is bound
      // read-only; the link itself is pinned with the folder that holds it (effectiveProtection).
      const at = path.join(root, part);
      out.push(at);
      try {
        const real = realpathSync(at);
        if (real !== at) out.push(real);
      } catch {
        // absent: nothing more to add
      }
    }
  } catch {
    // not found: nothing to add
  }
  return out;
}

/**
 * Every unix socket listening at a path on this host (/proc/net/unix: the listening flag, a path). A
 * daemon's socket (Docker's, containerd's, a session bus) lets a command ask for what its confinement
 * refuses it — a privileged container, a process outside the run — so no confined command reaches one.
 */
function listeningSockets(): string[] {
  const out = new Set<string>();
  for (const line of readOr('/proc/net/unix').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    const flags = Number.parseInt(f[3] ?? '0', 16);
    const where = f[7];
    if ((flags & 0x10000) === 0 || where === undefined || !where.startsWith('/')) continue;
    try {
      out.add(realpathSync(where));
    } catch {
      // gone, or its folder is not ours to see
    }
  }
  return [...out].sort();
}

interface Mount {
  dev: string;
  /** The folder of its file system the mount shows. */
  root: string;
  at: string;
}

/** capsule's own mount table (mountinfo's octal escapes decoded). */
function ownMounts(): Mount[] {
  const unescape = (f: string): string =>
    f.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  return readOr('/proc/self/mountinfo')
    .split('\n')
    .map((line) => line.split(' '))
    .filter((f) => f.length > 5)
    .map((f) => ({ dev: f[2] as string, root: unescape(f[3] as string), at: unescape(f[4] as string) }));
}

/** `p` relative to `dir` when it is `dir` or inside it ('' for `dir` itself). */
const below = (p: string, dir: string): string | undefined =>
  p === dir ? '' : dir === '/' ? p.slice(1) : p.startsWith(dir + '/') ? p.slice(dir.length + 1) : undefined;

/**
 * Every other name the mount table gives `p`: where the same file system is mounted again (a bind mount of
 * a parent folder elsewhere), the same bytes are reachable there, and are protected there too. A mount that
 * shows a folder inside `p` is an alias of part of it: its mount point is protected whole.
 */
function aliasesOf(p: string, mounts: readonly Mount[]): string[] {
  let home: Mount | undefined;
  for (const m of mounts)
    if (below(p, m.at) !== undefined && (home === undefined || m.at.length >= home.at.length)) home = m;
  if (home === undefined) return [];
  const inFs = path.posix.join(home.root, below(p, home.at) as string);
  const out: string[] = [];
  for (const m of mounts) {
    if (m.dev !== home.dev || m === home) continue;
    const under = below(inFs, m.root);
    if (under !== undefined) out.push(path.posix.join(m.at, under));
    else if (below(m.root, inFs) !== undefined) out.push(m.at);
  }
  return [...new Set(out)].filter((a) => a !== p);
}
