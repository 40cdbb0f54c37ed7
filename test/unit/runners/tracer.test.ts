import { describe, expect, it } from 'vitest';
import { parseTrace, parseTraceLine } from '../../../src/runners/tracer.js';

describe('parseTraceLine', () => {
  it('reads opens with their real paths, and the mode from the flags', () => {
    expect(
      parseTraceLine('openat(AT_FDCWD</w>, "data/in.txt", O_RDONLY|O_CLOEXEC) = 3</p/data/in.txt>'),
    ).toEqual([{ op: 'read', path: '/p/data/in.txt', outcome: 'ok', via: 'tracer' }]);
    expect(parseTraceLine('openat(AT_FDCWD</w>, "o", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</w/o>')[0]?.op).toBe(
      'create',
    );
    expect(parseTraceLine('openat(AT_FDCWD</w>, "d", O_RDONLY|O_DIRECTORY) = 3</w/d>')[0]?.op).toBe('list');
  });

  it('resolves a failed open against its folder, and tells a refusal from a missing file', () => {
    expect(
      parseTraceLine('openat(AT_FDCWD</w>, "../x", O_RDONLY) = -1 ENOENT (No such file or directory)'),
    ).toEqual([{ op: 'read', path: '/x', outcome: 'failed', via: 'tracer' }]);
    expect(
      parseTraceLine('openat(AT_FDCWD</w>, "/s", O_WRONLY) = -1 EROFS (Read-only file system)')[0]?.outcome,
    ).toBe('refused');
  });

  it('reads renames, removals, executions and quoted names', () => {
    expect(
      parseTraceLine('renameat2(AT_FDCWD</w>, "a", AT_FDCWD</w>, "b\\"c", RENAME_NOREPLACE) = 0'),
    ).toEqual([
      { op: 'remove', path: '/w/a', outcome: 'ok', via: 'tracer' },
      { op: 'create', path: '/w/b"c', outcome: 'ok', via: 'tracer' },
    ]);
    expect(parseTraceLine('unlinkat(AT_FDCWD</w>, "z", 0) = 0')[0]).toMatchObject({
      op: 'remove',
      path: '/w/z',
    });
    expect(parseTraceLine('execve("/usr/bin/cat", ["cat"], 0x1 /* 3 vars */) = 0')[0]).toMatchObject({
      op: 'exec',
      path: '/usr/bin/cat',
    });
  });

  it('reads IPv4, IPv6 and unix connects; an in-progress connect counts', () => {
    expect(
      parseTraceLine(
        'connect(19<socket:[1]>, {sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr("127.0.0.1")}, 16) = -1 EINPROGRESS (Operation now in progress)',
      ),
    ).toEqual([{ op: 'connect', host: '127.0.0.1', port: 8080, outcome: 'ok', via: 'tracer' }]);
    expect(
      parseTraceLine(
        'connect(3<socket:[2]>, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0',
      )[0],
    ).toMatchObject({ host: '[::1]', port: 443 });
    expect(
      parseTraceLine(
        'connect(3<socket:[3]>, {sa_family=AF_UNIX, sun_path="/run/docker.sock"}, 110) = -1 ENOENT (x)',
      )[0],
    ).toMatchObject({ op: 'connect', path: '/run/docker.sock', outcome: 'failed' });
  });

  it('ignores what is not a finished call it knows', () => {
    expect(parseTraceLine('+++ exited with 0 +++')).toEqual([]);
    expect(parseTraceLine('write(1, "openat(", 7) = 7')).toEqual([]);
    expect(parseTraceLine('garbage')).toEqual([]);
  });

  it('drops repeats across the files of several processes', () => {
    const line = 'openat(AT_FDCWD</w>, "a", O_RDONLY) = 3</w/a>';
    expect(parseTrace([`${line}\n${line}`, line])).toHaveLength(1);
  });
});
