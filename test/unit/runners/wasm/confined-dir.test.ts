import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
  closeSync,
  constants,
  linkSync,
  readSync,
  statSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfinedDir, MAX_SYMLINK_HOPS, leadsDownward } from '../../../../src/runners/wasm/confined-dir.js';
import { isReservedName, RESERVED_NAME_PATTERN } from '../../../../src/project/protected-state.js';

const { O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND } = constants;

let base: string;
let grant: string;
let dir: ConfinedDir;

function read(d: ConfinedDir, p: string, follow = true): string {
  const fd = d.openFile(p, { follow, flags: O_RDONLY });
  try {
    const buf = Buffer.alloc(4096);
    return buf.subarray(0, readSync(fd, buf)).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

const codeOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
  } catch (err) {
    return (err as { code?: string }).code;
  }
  return undefined;
};

beforeEach(() => {
  base = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'capsule-confined-')));
  grant = path.join(base, 'grant');
  mkdirSync(path.join(grant, 'sub', 'deeper'), { recursive: true });
  writeFileSync(path.join(grant, 'a.txt'), 'inside');
  writeFileSync(path.join(grant, 'sub', 'deeper', 'b.txt'), 'deep');
  writeFileSync(path.join(base, 'secret.txt'), 'TOP SECRET');
  dir = ConfinedDir.open(grant, { hidden: isReservedName });
});

afterEach(() => {
  dir.close();
  rmSync(base, { recursive: true, force: true });
});

describe('ConfinedDir: walking beneath the directory', () => {
  it('reads files beneath it, with . and .. that stay inside', () => {
    expect(read(dir, 'a.txt')).toBe('inside');
    expect(read(dir, 'sub/deeper/b.txt')).toBe('deep');
    expect(read(dir, './sub/../sub/./deeper/../../a.txt')).toBe('inside');
  });

  it.each(['..', '../secret.txt', 'sub/../../secret.txt', 'sub/deeper/../../../secret.txt'])(
    'refuses .. above the directory: %s',
    (p) => {
      expect(codeOf(() => read(dir, p))).toBe('ENOTCAPABLE');
    },
  );

  it('refuses absolute paths, even ones naming the granted folder', () => {
    expect(codeOf(() => read(dir, path.join(base, 'secret.txt')))).toBe('ENOTCAPABLE');
    expect(codeOf(() => read(dir, path.join(grant, 'a.txt')))).toBe('ENOTCAPABLE');
    expect(codeOf(() => dir.stat('/etc', { follow: true }))).toBe('ENOTCAPABLE');
  });

  it('does not follow a host-planted symlink out (file, directory, relative, absolute)', () => {
    symlinkSync(path.join(base, 'secret.txt'), path.join(grant, 'abs-file'));
    symlinkSync('../secret.txt', path.join(grant, 'rel-file'));
    symlinkSync(base, path.join(grant, 'abs-dir'));
    symlinkSync('..', path.join(grant, 'up'));
    for (const p of ['abs-file', 'rel-file', 'abs-dir/secret.txt', 'up/secret.txt', 'sub/../up/secret.txt']) {
      expect(
        codeOf(() => read(dir, p)),
        p,
      ).toBe('ENOTCAPABLE');
    }
    // Writing through one is refused too, and the outside file is unchanged.
    expect(codeOf(() => dir.openFile('rel-file', { follow: true, flags: O_WRONLY | O_TRUNC }))).toBe(
      'ENOTCAPABLE',
    );
    expect(codeOf(() => dir.openFile('abs-dir/new.txt', { follow: true, flags: O_WRONLY | O_CREAT }))).toBe(
      'ENOTCAPABLE',
    );
    expect(readFileSync(path.join(base, 'secret.txt'), 'utf8')).toBe('TOP SECRET');
    expect(existsSync(path.join(base, 'new.txt'))).toBe(false);
  });

  it('follows a chain of symlinks that stays inside', () => {
    symlinkSync('sub/deeper', path.join(grant, 'l1'));
    symlinkSync('l1/b.txt', path.join(grant, 'l2'));
    symlinkSync('../../l2', path.join(grant, 'sub', 'deeper', 'l3'));
    expect(read(dir, 'l2')).toBe('deep');
    expect(read(dir, 'sub/deeper/l3')).toBe('deep');
    expect(read(dir, 'l1/../deeper/b.txt')).toBe('deep');
  });

  it('detects symlink loops with a hop limit', () => {
    symlinkSync('self', path.join(grant, 'self'));
    symlinkSync('ping', path.join(grant, 'pong'));
    symlinkSync('pong', path.join(grant, 'ping'));
    expect(codeOf(() => read(dir, 'self'))).toBe('ELOOP');
    expect(codeOf(() => read(dir, 'ping/x'))).toBe('ELOOP');
    // A chain just under the limit resolves.
    writeFileSync(path.join(grant, 'end'), 'end');
    let prev = 'end';
    for (let i = 0; i < MAX_SYMLINK_HOPS; i++) {
      symlinkSync(prev, path.join(grant, `c${i}`));
      prev = `c${i}`;
    }
    expect(read(dir, prev)).toBe('end');
    symlinkSync(prev, path.join(grant, 'one-too-many'));
    expect(codeOf(() => read(dir, 'one-too-many'))).toBe('ELOOP');
  });

  it('honours no-follow for the last component only', () => {
    symlinkSync('a.txt', path.join(grant, 'link'));
    symlinkSync('sub', path.join(grant, 'sublink'));
    expect(codeOf(() => read(dir, 'link', false))).toBe('ELOOP');
    expect(dir.stat('link', { follow: false }).isSymbolicLink()).toBe(true);
    expect(dir.stat('link', { follow: true }).isFile()).toBe(true);
    // Intermediate links are always followed (when they stay inside).
    expect(read(dir, 'sublink/deeper/b.txt', false)).toBe('deep');
  });

  it('gives trailing slashes their POSIX meaning', () => {
    symlinkSync('sub', path.join(grant, 'sublink'));
    symlinkSync('a.txt', path.join(grant, 'filelink'));
    expect(dir.stat('sub/', { follow: false }).isDirectory()).toBe(true);
    // A trailing slash follows a symlink even with no-follow, and must end at a directory.
    expect(dir.stat('sublink/', { follow: false }).isDirectory()).toBe(true);
    expect(codeOf(() => dir.openFile('a.txt/', { follow: true, flags: O_RDONLY }))).toBe('ENOTDIR');
    expect(codeOf(() => dir.openFile('filelink/', { follow: false, flags: O_RDONLY }))).toBe('ENOTDIR');
    expect(codeOf(() => dir.openFile('new/', { follow: true, flags: O_WRONLY | O_CREAT }))).toBe('EINVAL');
    expect(codeOf(() => dir.unlink('a.txt/'))).toBe('ENOTDIR');
    dir.mkdir('made/');
    expect(existsSync(path.join(grant, 'made'))).toBe(true);
    dir.rmdir('made/');
    expect(existsSync(path.join(grant, 'made'))).toBe(false);
  });

  it('never shows or creates capsule state inside a grant', () => {
    writeFileSync(path.join(grant, 'capsule.json'), '{}');
    mkdirSync(path.join(grant, '.capsule'));
    expect(codeOf(() => read(dir, 'capsule.json'))).toBe('ENOENT');
    expect(codeOf(() => dir.stat('.capsule', { follow: false }))).toBe('ENOENT');
    expect(dir.readdir().map((d) => d.name)).not.toContain('capsule.json');
    symlinkSync('capsule.json', path.join(grant, 'cfg'));
    expect(codeOf(() => read(dir, 'cfg'))).toBe('ENOENT');
    expect(codeOf(() => dir.mkdir('sub/.capsule'))).toBe('ENOENT');
    expect(codeOf(() => dir.rename('a.txt', dir, 'capsule.json'))).toBe('ENOENT');
    expect(existsSync(path.join(grant, 'sub', '.capsule'))).toBe(false);
  });
});

describe('the reserved-name pattern the worker gets', () => {
  it('hides exactly what isReservedName reserves, in any case', () => {
    const re = new RegExp(RESERVED_NAME_PATTERN, 'i');
    for (const n of [
      'capsule.json',
      'CAPSULE.JSON',
      '.capsule',
      '.Capsule',
      '.capsule-x',
      '.capsule_y',
      '.capsule.z',
    ])
      expect(re.test(n) && isReservedName(n), n).toBe(true);
    for (const n of ['capsule.jsonx', 'xcapsule.json', 'capsule', '.capsulex', 'data', 'capsule-json'])
      expect(re.test(n) || isReservedName(n), n).toBe(false);
  });
});

describe('ConfinedDir: changes', () => {
  it('creates, renames, links and removes beneath it, on the host folder itself', () => {
    const fd = dir.openFile('new.txt', { follow: true, flags: O_WRONLY | O_CREAT, mode: 0o644 });
    closeSync(fd);
    expect(existsSync(path.join(grant, 'new.txt'))).toBe(true);
    dir.rename('new.txt', dir, 'sub/moved.txt');
    dir.link('sub/moved.txt', { follow: false }, dir, 'hard.txt');
    expect(existsSync(path.join(grant, 'hard.txt'))).toBe(true);
    dir.unlink('hard.txt');
    dir.unlink('sub/moved.txt');
    expect(existsSync(path.join(grant, 'sub', 'moved.txt'))).toBe(false);
  });

  it('refuses renames and links that would leave the directory', () => {
    expect(codeOf(() => dir.rename('a.txt', dir, '../a.txt'))).toBe('ENOTCAPABLE');
    expect(codeOf(() => dir.link('../secret.txt', { follow: false }, dir, 'stolen'))).toBe('ENOTCAPABLE');
    symlinkSync(path.join(base, 'secret.txt'), path.join(grant, 'planted'));
    // A hard link of a planted symlink, following it: refused; not following: a link to the link.
    expect(codeOf(() => dir.link('planted', { follow: true }, dir, 'stolen'))).toBe('ENOTCAPABLE');
    expect(existsSync(path.join(grant, 'stolen'))).toBe(false);
    expect(existsSync(path.join(base, 'a.txt'))).toBe(false);
  });

  it('refuses links and renames into another grant (EXDEV), through its directories too; allows them within one', () => {
    const otherPath = path.join(base, 'other');
    mkdirSync(otherPath);
    writeFileSync(path.join(otherPath, 'o.txt'), 'other');
    for (const readOnly of [false, true]) {
      const other = ConfinedDir.open(otherPath, { readOnly });
      const sub = dir.openDir('sub', { follow: false });
      try {
        // From this grant (or a directory opened beneath it) into the other, and back.
        expect(codeOf(() => dir.link('a.txt', { follow: false }, other, 'hl'))).toBe(
          readOnly ? 'EROFS' : 'EXDEV',
        );
        expect(codeOf(() => sub.link('deeper/b.txt', { follow: false }, other, 'hl'))).toBe(
          readOnly ? 'EROFS' : 'EXDEV',
        );
        expect(codeOf(() => other.link('o.txt', { follow: false }, dir, 'hl'))).toBe('EXDEV');
        expect(codeOf(() => dir.rename('a.txt', other, 'moved'))).toBe(readOnly ? 'EROFS' : 'EXDEV');
        if (!readOnly) expect(codeOf(() => other.rename('o.txt', sub, 'moved'))).toBe('EXDEV');
      } finally {
        sub.close();
        other.close();
      }
    }
    expect(statSync(path.join(grant, 'a.txt')).nlink).toBe(1);
    expect(statSync(path.join(otherPath, 'o.txt')).nlink).toBe(1);
    expect(existsSync(path.join(otherPath, 'hl'))).toBe(false);
    expect(existsSync(path.join(grant, 'hl'))).toBe(false);
    // Within one grant, a directory opened beneath it is the same grant.
    const sub = dir.openDir('sub', { follow: false });
    try {
      dir.link('a.txt', { follow: false }, sub, 'a-link.txt');
      sub.rename('a-link.txt', dir, 'back.txt');
    } finally {
      sub.close();
    }
    expect(statSync(path.join(grant, 'back.txt')).ino).toBe(statSync(path.join(grant, 'a.txt')).ino);
  });

  it('lets a guest make symlinks that lead downward and refuses absolute or .. targets at creation', () => {
    dir.symlink('sub/deeper/b.txt', 'ok');
    expect(read(dir, 'ok')).toBe('deep');
    dir.symlink('deeper', 'sub/down');
    expect(read(dir, 'sub/down/b.txt')).toBe('deep');
    dir.symlink('dangling', 'dangle');
    expect(readlinkSync(path.join(grant, 'dangle'))).toBe('dangling');
    for (const [target, at] of [
      ['/etc/passwd', 'abs'],
      ['../secret.txt', 'up'],
      ['../../secret.txt', 'sub/up'],
      ['sub/../../secret.txt', 'sneaky'],
      // Inside when made, but a second link through it, or moving sub/, would take it out for a host tool.
      ['..', 'sub/parent'],
      ['../a.txt', 'sub/sibling'],
    ] as const) {
      expect(
        codeOf(() => dir.symlink(target, at)),
        target,
      ).toBe('ENOTCAPABLE');
      expect(existsSync(path.join(grant, at))).toBe(false);
    }
  });

  it('enforces read-only by effect: the host folder is unchanged', () => {
    const ro = ConfinedDir.open(grant, { readOnly: true });
    try {
      expect(read(ro, 'a.txt')).toBe('inside');
      expect(codeOf(() => ro.openFile('a.txt', { follow: true, flags: O_WRONLY | O_TRUNC }))).toBe('EROFS');
      expect(codeOf(() => ro.openFile('n.txt', { follow: true, flags: O_WRONLY | O_CREAT }))).toBe('EROFS');
      expect(codeOf(() => ro.mkdir('d'))).toBe('EROFS');
      expect(codeOf(() => ro.unlink('a.txt'))).toBe('EROFS');
      expect(codeOf(() => ro.rmdir('sub/deeper'))).toBe('EROFS');
      expect(codeOf(() => ro.symlink('a.txt', 'l'))).toBe('EROFS');
      expect(codeOf(() => ro.rename('a.txt', ro, 'b.txt'))).toBe('EROFS');
      expect(codeOf(() => ro.link('a.txt', { follow: false }, ro, 'h'))).toBe('EROFS');
      expect(codeOf(() => ro.utimes('a.txt', { follow: true }, { mtime: 1n }))).toBe('EROFS');
      // A directory opened beneath a read-only one is read-only too.
      const sub = ro.openDir('sub', { follow: true });
      expect(codeOf(() => sub.mkdir('x'))).toBe('EROFS');
      sub.close();
      // And a rename from a rw directory into a ro one is refused.
      expect(codeOf(() => dir.rename('a.txt', ro, 'moved.txt'))).toBe('EROFS');
    } finally {
      ro.close();
    }
    expect(readFileSync(path.join(grant, 'a.txt'), 'utf8')).toBe('inside');
    for (const p of ['n.txt', 'd', 'l', 'b.txt', 'h', 'moved.txt', 'sub/x'])
      expect(existsSync(path.join(grant, p)), p).toBe(false);
  });

  it('confines a directory opened beneath the grant to itself', () => {
    const sub = dir.openDir('sub', { follow: true });
    try {
      expect(read(sub, 'deeper/b.txt')).toBe('deep');
      expect(codeOf(() => read(sub, '../a.txt'))).toBe('ENOTCAPABLE');
    } finally {
      sub.close();
    }
  });

  it('refuses a grant that is itself a symlink', () => {
    symlinkSync(grant, path.join(base, 'grant-link'));
    expect(codeOf(() => ConfinedDir.open(path.join(base, 'grant-link')))).toBe('ENOTDIR');
  });

  it('is not fooled by a directory swapped for a symlink between walk and open (TOCTOU)', () => {
    // The walk holds each directory by fd: once `sub` is resolved, swapping the name for a link out
    // cannot redirect what is opened beneath it.
    let swapped = false;
    const result = dir.at('sub/deeper/b.txt', { follow: true }, (r) => {
      rmSync(path.join(grant, 'sub'), { recursive: true });
      mkdirSync(path.join(base, 'deeper'));
      writeFileSync(path.join(base, 'deeper', 'b.txt'), 'OUTSIDE');
      symlinkSync(base, path.join(grant, 'sub'));
      swapped = true;
      return codeOf(() => readFileSync(r.path, 'utf8'));
    });
    expect(swapped).toBe(true);
    // The held (now deleted) directory has no b.txt: nothing outside was read.
    expect(result).toBe('ENOENT');
    // A fresh walk sees the planted link and refuses it.
    expect(codeOf(() => read(dir, 'sub/deeper/b.txt'))).toBe('ENOTCAPABLE');
  });
});

describe('leadsDownward', () => {
  it('accepts only relative targets without ..', () => {
    expect(leadsDownward('a/b')).toBe(true);
    expect(leadsDownward('./a//b/')).toBe(true);
    expect(leadsDownward('..')).toBe(false);
    expect(leadsDownward('../a')).toBe(false);
    expect(leadsDownward('a/../b')).toBe(false);
    expect(leadsDownward('/x')).toBe(false);
    expect(leadsDownward('')).toBe(false);
  });
});

describe('ConfinedDir: hard links (their other names may lie outside)', () => {
  beforeEach(() => linkSync(path.join(base, 'secret.txt'), path.join(grant, 'linked.txt')));

  it.each([
    ['O_WRONLY|O_TRUNC', O_WRONLY | O_TRUNC],
    ['O_RDWR', O_RDWR],
    ['O_WRONLY|O_APPEND', O_WRONLY | O_APPEND],
    ['O_RDONLY|O_TRUNC', O_RDONLY | O_TRUNC],
    ['O_WRONLY|O_CREAT|O_TRUNC', O_WRONLY | O_CREAT | O_TRUNC],
  ])('refuses to open one with %s, before anything is truncated', (_, flags) => {
    expect(codeOf(() => dir.openFile('linked.txt', { follow: true, flags }))).toBe('ENOTCAPABLE');
    expect(readFileSync(path.join(base, 'secret.txt'), 'utf8')).toBe('TOP SECRET');
  });

  it('opens one to read, and refuses to set its times', () => {
    expect(read(dir, 'linked.txt')).toBe('TOP SECRET');
    const before = statSync(path.join(base, 'secret.txt')).mtimeMs;
    expect(codeOf(() => dir.utimes('linked.txt', { follow: false }, { mtime: 0n }))).toBe('ENOTCAPABLE');
    expect(statSync(path.join(base, 'secret.txt')).mtimeMs).toBe(before);
  });

  it('keeps O_TRUNC as it was on a file with one link (also with O_RDONLY), and EISDIR on a directory', () => {
    closeSync(dir.openFile('a.txt', { follow: true, flags: O_RDONLY | O_TRUNC }));
    expect(readFileSync(path.join(grant, 'a.txt'), 'utf8')).toBe('');
    expect(codeOf(() => dir.openFile('sub', { follow: true, flags: O_RDONLY | O_TRUNC }))).toBe('EISDIR');
  });
});
