import { describe, expect, it } from 'vitest';
import { matchPathGlob, matchRuleGlob } from '../../../src/base/glob.js';
import { grantCovers, makeKey, parseKey } from '../../../src/permissions/keys.js';

describe('grantCovers', () => {
  const git = makeKey('run_command', 'git');
  const compound = makeKey('run_command', 'git status && touch X', true);
  it('exact and wildcard grants cover simple commands', () => {
    expect(grantCovers('run_command:git', git)).toBe(true);
    expect(grantCovers('run_command:git:*', git)).toBe(true);
    expect(grantCovers('run_command:*', git)).toBe(true);
    expect(grantCovers('run_command:gi', git)).toBe(false);
    expect(grantCovers('run_command:g:*', git)).toBe(false);
    expect(grantCovers('run_capability:*', git)).toBe(false);
  });
  it('never covers a compound command except by the identical string', () => {
    for (const grant of ['run_command:git', 'run_command:git:*', 'run_command:*', 'run_command:git status']) {
      expect(grantCovers(grant, compound)).toBe(false);
    }
    expect(grantCovers('run_command:git status && touch X', compound)).toBe(true);
  });
  it('write_file grants are path globs', () => {
    expect(grantCovers('write_file:tests/**', makeKey('write_file', 'tests/a/b.ts'))).toBe(true);
    expect(grantCovers('write_file:tests/*', makeKey('write_file', 'tests/a/b.ts'))).toBe(false);
    expect(grantCovers('write_file:src/*.ts', makeKey('write_file', 'src/x.ts'))).toBe(true);
  });
  it('parseKey splits at the first colon and rejects malformed keys', () => {
    expect(parseKey('run_command:git:*')).toMatchObject({ tool: 'run_command', action: 'git:*' });
    expect(() => parseKey('run_command:')).toThrow(/not a permission key/);
    expect(() => parseKey('Run:x')).toThrow(/not a permission key/);
  });
});

describe('globs', () => {
  it('rule globs: * spans spaces and slashes (fnmatch)', () => {
    expect(matchRuleGlob('git *', 'git log --oneline')).toBe(true);
    expect(matchRuleGlob('git *', 'gitx')).toBe(false);
    expect(matchRuleGlob('src/*', 'src/a/b')).toBe(true);
    expect(matchRuleGlob('rm -[rf]*', 'rm -rf /')).toBe(true);
    expect(matchRuleGlob('a?c', 'abc')).toBe(true);
    expect(matchRuleGlob('a\\*', 'a*')).toBe(true);
    expect(matchRuleGlob('a\\*', 'ab')).toBe(false);
    expect(matchRuleGlob('(x)+$', '(x)+$')).toBe(true);
  });
  it('path globs: * stays in a segment, ** spans segments', () => {
    expect(matchPathGlob('src/*.ts', 'src/a.ts')).toBe(true);
    expect(matchPathGlob('src/*.ts', 'src/a/b.ts')).toBe(false);
    expect(matchPathGlob('src/**/*.ts', 'src/b.ts')).toBe(true);
    expect(matchPathGlob('src/**/*.ts', 'src/a/b/c.ts')).toBe(true);
    expect(matchPathGlob('src/**', 'src/a/b')).toBe(true);
    expect(matchPathGlob('src/[!x]*', 'src/y1')).toBe(true);
    expect(matchPathGlob('src/[!x]*', 'src/x1')).toBe(false);
  });
});

describe('commandLine (the words after --)', () => {
  it('keeps one word as the command line and re-quotes several', async () => {
    const { commandLine } = await import('../../../src/cli/args.js');
    expect(commandLine(['git status && ls'])).toBe('git status && ls');
    expect(commandLine(['git', 'commit', '-m', "a b's"])).toBe("git commit -m 'a b'\\''s'");
    expect(commandLine(['git', 'status', '&&', 'touch', 'X'])).toBe("git status '&&' touch X");
    expect(() => commandLine([])).toThrow(/No command/);
  });
});

describe('globs match in linear time (a rule with many stars cannot stall the gate)', () => {
  it('answers for star-heavy globs over a long subject (a backtracking regex does not, test/unit/linear-regex)', () => {
    const subject = 'a'.repeat(5000);
    expect(matchRuleGlob('*a*a*a*a*a*a*a*a*a*a*a*a*b', subject)).toBe(false);
    expect(matchPathGlob('**/a*a*a*a*a*a*a*a*a*a*b', subject)).toBe(false);
    expect(matchRuleGlob('*a*a*a*a*a*a*a*a*a*a*a*a*', subject)).toBe(true);
  });
});
