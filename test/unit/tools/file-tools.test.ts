import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';
import { CATASTROPHIC } from '../../helpers/catastrophic-regex.js';

describe('file tools: confinement to the project root', () => {
  it('refuses traversal, absolute paths and symlink escapes in every path argument, before anyone is asked', async () => {
    const f = await agentFixture({
      answers: ['Once', 'Once', 'Once', 'Once', 'Once', 'Once', 'Once', 'Once'],
    });
    const outside = path.join(tmpdir(), `capsule-outside-${process.pid}.txt`);
    await writeFile(outside, 'secret\n');
    await symlink(tmpdir(), path.join(f.root, 'escape'));
    await writeFile(path.join(f.root, 'ok.txt'), 'hello\n');
    await symlink(outside, path.join(f.root, 'outlink.txt'));
    await symlink(path.join(tmpdir(), `capsule-nowhere-${process.pid}`, 'x'), path.join(f.root, 'dangling'));
    const bad = [
      '../outside.txt',
      outside,
      'escape/x.txt',
      'sub/../../x',
      'a\0b',
      'outlink.txt',
      'dangling',
      'dangling/y',
    ];
    const calls: Array<[string, (p: string) => Record<string, unknown>]> = [
      ['read_file', (p) => ({ path: p })],
      ['glob', (p) => ({ pattern: '*', path: p })],
      ['grep', (p) => ({ pattern: 'x', path: p })],
      ['diff', (p) => ({ path: p, content: 'x' })],
      ['diff', (p) => ({ path: 'ok.txt', otherPath: p })],
      ['write_file', (p) => ({ path: p, content: 'pwned' })],
      ['edit_file', (p) => ({ path: p, oldText: 'secret', newText: 'pwned' })],
      ['run_command', (p) => ({ command: 'true', cwd: p })],
    ];
    for (const [tool, args] of calls) {
      for (const p of bad) {
        expect(`${tool} ${p}: ${await codeOf(f.session.call(tool, args(p)))}`).toBe(
          `${tool} ${p}: PATH_ESCAPE`,
        );
      }
    }
    expect(await readFile(outside, 'utf8')).toBe('secret\n');
    expect(f.asked()).toEqual([]);
  });

  it('glob and grep patterns cannot climb out either', async () => {
    const f = await agentFixture();
    expect(await codeOf(f.session.call('glob', { pattern: '../*' }))).toBe('PATH_ESCAPE');
    expect(await codeOf(f.session.call('glob', { pattern: '/etc/*' }))).toBe('PATH_ESCAPE');
    expect(await codeOf(f.session.call('grep', { pattern: 'x', glob: '../**' }))).toBe('PATH_ESCAPE');
  });

  it('never writes capsule.json or .capsule/ (even in bypass mode, even through a symlink)', async () => {
    const f = await agentFixture();
    f.session.gate.setMode('bypass');
    const before = await readFile(path.join(f.root, 'capsule.json'), 'utf8');
    await symlink(path.join(f.root, 'capsule.json'), path.join(f.root, 'innocent.json'));
    for (const p of [
      'capsule.json',
      'CAPSULE.JSON',
      './capsule.json',
      'innocent.json',
      '.capsule/profiles/evil.md',
      '.capsule/audit.jsonl',
    ]) {
      expect(`${p}: ${await codeOf(f.session.call('write_file', { path: p, content: '{}' }))}`).toBe(
        `${p}: PATH_ESCAPE`,
      );
    }
    expect(
      await codeOf(f.session.call('edit_file', { path: 'capsule.json', oldText: '1', newText: '2' })),
    ).toBe('PATH_ESCAPE');
    expect(await readFile(path.join(f.root, 'capsule.json'), 'utf8')).toBe(before);
    expect(existsSync(path.join(f.root, '.capsule', 'profiles', 'evil.md'))).toBe(false);
  });
});

describe('file tools: behaviour', () => {
  it('read_file, glob, grep and diff work inside the project without asking', async () => {
    const f = await agentFixture();
    await mkdir(path.join(f.root, 'src', 'deep'), { recursive: true });
    await writeFile(path.join(f.root, 'src', 'a.ts'), 'one\ntwo\nthree\n');
    await writeFile(path.join(f.root, 'src', 'deep', 'b.ts'), 'two again\n');
    await writeFile(path.join(f.root, 'src', 'c.md'), 'two\n');
    expect(await f.session.call('read_file', { path: 'src/a.ts', offset: 2, limit: 1 })).toMatchObject({
      content: 'two',
    });
    expect(await f.session.call('glob', { pattern: '**/*.ts' })).toEqual({
      files: ['src/a.ts', 'src/deep/b.ts'],
      truncated: false,
    });
    expect(await f.session.call('glob', { pattern: '*.ts', path: 'src' })).toEqual({
      files: ['src/a.ts'],
      truncated: false,
    });
    const grep = (await f.session.call('grep', { pattern: '^two', glob: '**/*.ts' })) as {
      matches: unknown[];
    };
    expect(grep.matches).toEqual([
      { file: 'src/a.ts', line: 2, text: 'two' },
      { file: 'src/deep/b.ts', line: 1, text: 'two again' },
    ]);
    const diff = (await f.session.call('diff', { path: 'src/a.ts', content: 'one\nTWO\nthree\n' })) as {
      diff: string;
    };
    expect(diff.diff).toContain('-two\n+TWO\n');
    expect(f.asked()).toEqual([]);
  });

  it('diff of two 3000-line files differing in every line answers "too large", and shows a final-newline change', async () => {
    const f = await agentFixture();
    const side = (tag: string): string =>
      Array.from({ length: 3000 }, (_, i) => `${tag} ${i}`).join('\n') + '\n';
    await writeFile(path.join(f.root, 'old.txt'), side('old'));
    await writeFile(path.join(f.root, 'new.txt'), side('new'));
    expect(await f.session.call('diff', { path: 'old.txt', otherPath: 'new.txt' })).toMatchObject({
      identical: false,
      tooLarge: true,
      diff: '',
    });
    await writeFile(path.join(f.root, 'nl.txt'), 'a\nb\n');
    const nl = (await f.session.call('diff', { path: 'nl.txt', content: 'a\nb' })) as {
      identical: boolean;
      diff: string;
    };
    expect(nl.identical).toBe(false);
    expect(nl.diff).toContain('-b\n+b\n\\ No newline at end of file\n');
  });

  it('write_file asks write_file:<path>, writes atomically and leaves no temp file; edit_file needs a unique match', async () => {
    const f = await agentFixture({ answers: ['Once', 'Once', 'Once', 'Once'] });
    expect(
      await f.session.call('write_file', { path: 'notes/a.txt', content: 'x = 1\nx = 1\n' }),
    ).toMatchObject({ created: true });
    expect(f.asked()).toEqual(['write_file:notes/a.txt']);
    expect(
      await codeOf(f.session.call('edit_file', { path: 'notes/a.txt', oldText: 'x = 1', newText: 'x = 2' })),
    ).toBe('USAGE');
    expect(
      await f.session.call('edit_file', {
        path: 'notes/a.txt',
        oldText: 'x = 1',
        newText: 'x = 2',
        replaceAll: true,
      }),
    ).toEqual({
      path: 'notes/a.txt',
      replacements: 2,
    });
    expect(await readFile(path.join(f.root, 'notes', 'a.txt'), 'utf8')).toBe('x = 2\nx = 2\n');
    expect(await readdir(path.join(f.root, 'notes'))).toEqual(['a.txt']);
  });

  it('a denied write never reaches execute()', async () => {
    const f = await agentFixture({ answers: ['Deny'] });
    expect(await codeOf(f.session.call('write_file', { path: 'a.txt', content: 'x' }))).toBe(
      'PERMISSION_DENIED',
    );
    expect(existsSync(path.join(f.root, 'a.txt'))).toBe(false);
  });

  it('bad arguments name the field', async () => {
    const f = await agentFixture();
    await expect(f.session.call('read_file', { path: 3 })).rejects.toThrow(/path/);
    await expect(f.session.call('read_file', {})).rejects.toThrow(/Invalid arguments for read_file: path/);
    await expect(f.session.call('grep', { pattern: '(' })).rejects.toThrow(
      /pattern: .*not a valid regular expression/,
    );
  });
});

describe('grep: the agent’s pattern against the project’s files cannot stall capsule', () => {
  it('every pattern of the catastrophic family gets an answer on the line that explodes a backtracking engine', async () => {
    const f = await agentFixture();
    for (const [i, [, line]] of CATASTROPHIC.entries())
      await writeFile(path.join(f.root, `hostile-${i}.txt`), `${line.replace(/\n$/, '\r')}\nplain`);
    for (const [i, [pattern]] of CATASTROPHIC.entries()) {
      const r = (await f.session.call('grep', { pattern, path: `hostile-${i}.txt` })) as {
        matches: unknown[];
      };
      expect(r.matches, pattern).toEqual([]);
    }
    // The same tool still finds what matches (the answers above are not a refusal).
    const hit = (await f.session.call('grep', { pattern: '^(p|pl)+ain$' })) as { matches: unknown[] };
    expect(hit.matches.length).toBe(CATASTROPHIC.length);
  });

  it('a pattern RE2 cannot run (backreference, lookaround) is a usage error naming the field', async () => {
    const f = await agentFixture();
    for (const pattern of ['(a)\\1', '(?=a)a', '(?<!a)b']) {
      await expect(f.session.call('grep', { pattern }), pattern).rejects.toThrow(/pattern: .*linear time/);
    }
  });
});
