import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalGrantKey, keyCommand } from '../../../../src/permissions/commands/permission.js';
import { createCommandParser, type CommandParser } from '../../../../src/permissions/commands/parser.js';
import { isCapsuleError } from '../../../../src/base/errors.js';

let parser: CommandParser;
beforeAll(async () => {
  parser = await createCommandParser();
});
afterAll(() => parser.close());

describe('simple commands are keyed by their program', () => {
  it.each([
    ['git status', 'run_command:git'],
    ['git commit -m "a && b"', 'run_command:git'],
    ["git commit -m 'a; b | c'", 'run_command:git'],
    ['git log --format="%H %s"', 'run_command:git'],
    ['echo "$HOME" $USER', 'run_command:echo'],
    ['  ls   -la\t x  ', 'run_command:ls'],
    ['./scripts/build.sh --fast', 'run_command:./scripts/build.sh'],
    ['git \\\n  status', 'run_command:git'],
    ['echo a\\;b', 'run_command:echo'],
    ['git add {a,b}', 'run_command:git'], // brace expansion only makes arguments
  ])('%j → %s', (command, key) => {
    expect(keyCommand(parser, command)).toEqual({ tool: 'run_command', key, compound: false });
  });
});

describe('every compound form is keyed by the whole normalized string', () => {
  it.each([
    ['and-list', 'git status && git push', 'git status && git push'],
    ['or-list', 'git status || rm -rf x', 'git status || rm -rf x'],
    ['semicolon', 'git status; git push', 'git status; git push'],
    ['trailing semicolon', 'git push;', 'git push;'],
    ['pipe', 'git log | sh', 'git log | sh'],
    ['pipe stderr', 'git log |& sh', 'git log |& sh'],
    ['background', 'git fetch &', 'git fetch &'],
    ['background then command', 'git fetch & rm x', 'git fetch & rm x'],
    ['newline', 'git status\ngit push', 'git status\ngit push'],
    ['command substitution', 'git commit -m $(cat /etc/passwd)', 'git commit -m $(cat /etc/passwd)'],
    ['command substitution in double quotes', 'git commit -m "$(rm -rf ~)"', 'git commit -m "$(rm -rf ~)"'],
    ['backticks', 'git commit -m `id`', 'git commit -m `id`'],
    ['backticks in double quotes', 'git commit -m "`id`"', 'git commit -m "`id`"'],
    ['process substitution in', 'git apply <(curl x)', 'git apply <(curl x)'],
    ['process substitution out', 'git log >(sh)', 'git log >(sh)'],
    ['subshell', '(git push)', '(git push)'],
    ['brace group', '{ git push; }', '{ git push; }'],
    ['output redirection', 'git log > ~/.bashrc', 'git log > ~/.bashrc'],
    ['append redirection', 'git log >> x', 'git log >> x'],
    ['input redirection', 'git apply < patch', 'git apply < patch'],
    ['fd redirection', 'git log 2>&1', 'git log 2>&1'],
    ['here-doc', 'git apply <<EOF\nstuff\nEOF', 'git apply <<EOF\nstuff\nEOF'],
    ['here-string', 'git apply <<< "$x"', 'git apply <<< "$x"'],
    ['env-var prefix', 'GIT_SSH_COMMAND=evil git fetch', 'GIT_SSH_COMMAND=evil git fetch'],
    ['variable in command position', '$GIT status', '$GIT status'],
    ['braced variable in command position', '${GIT:-rm} -rf x', '${GIT:-rm} -rf x'],
    ['substitution in command position', '$(echo git) status', '$(echo git) status'],
    ['glob in command position', '* -rf', '* -rf'],
    ['quoted program', '"git" push', '"git" push'],
    ['negation', '! git diff', '! git diff'],
    ['if statement', 'if true; then git push; fi', 'if true; then git push; fi'],
    ['for loop', 'for f in *; do rm $f; done', 'for f in *; do rm $f; done'],
    ['function definition', 'f() { rm x; }; f', 'f() { rm x; }; f'],
    ['arithmetic expansion', 'git log -n $((1+1))', 'git log -n $((1+1))'],
    ['parameter expansion', 'git log ${X}', 'git log ${X}'],
    ['comment', 'git status # && git push', 'git status # && git push'],
    ['test command', '[[ -f x ]] && git push', '[[ -f x ]] && git push'],
    ['eval', "eval 'git status; rm x'", "eval 'git status; rm x'"],
    ['source', 'source ./evil.sh', 'source ./evil.sh'],
    ['dot', '. ./evil.sh', '. ./evil.sh'],
    ['exec', 'exec rm x', 'exec rm x'],
    ['command builtin', 'command rm x', 'command rm x'],
    ['time', 'time git push', 'time git push'],
  ])('%s', (_name, command, normalized) => {
    const result = keyCommand(parser, command);
    expect(result).toEqual({ tool: 'run_command', key: `run_command:${normalized}`, compound: true });
  });

  it.each([
    ['unterminated double quote', 'git commit -m "oops'],
    ['unterminated single quote', "git commit -m 'oops"],
    ['dangling operator', 'git status &&'],
    ['unclosed substitution', 'git log $(echo'],
    ['unclosed subshell', '(git push'],
  ])('parse errors fail closed: %s → compound, keyed verbatim', (_name, command) => {
    expect(keyCommand(parser, command)).toEqual({
      tool: 'run_command',
      key: `run_command:${command}`,
      compound: true,
    });
  });
});

describe('normalization', () => {
  it('collapses blanks between tokens, keeps quoted text byte for byte', () => {
    expect(keyCommand(parser, '  git   status  &&\tgit  commit -m "a   b"  ').key).toBe(
      'run_command:git status && git commit -m "a   b"',
    );
  });
  it('turns blank runs holding newlines into one newline', () => {
    expect(keyCommand(parser, 'ls  \n\n   pwd').key).toBe('run_command:ls\npwd');
  });
  it('keeps a line continuation verbatim, so it never collides with a newline', () => {
    const continued = keyCommand(parser, 'ls \\\n x && pwd').key;
    const twoLines = keyCommand(parser, 'ls\nx && pwd').key;
    expect(continued).not.toBe(twoLines);
  });
  it('keeps here-doc bodies verbatim', () => {
    expect(keyCommand(parser, 'cat  <<EOF\n  a   b\nEOF').key).toBe('run_command:cat <<EOF\n  a   b\nEOF');
  });
  it('gives the same key to the same command written with different spacing', () => {
    expect(keyCommand(parser, 'a|b').key).not.toBe(keyCommand(parser, 'a | b').key); // tokens differ in layout only
    expect(keyCommand(parser, 'a  |  b').key).toBe(keyCommand(parser, 'a | b').key);
  });
  it('lists the simple commands inside a compound one (deny rules look at each)', () => {
    expect(parser.analyze('git status && echo "$(rm -rf x)"').parts).toEqual([
      'git status',
      'echo "$(rm -rf x)"',
      'rm -rf x',
    ]);
  });
  it('refuses an empty command', () => {
    expect(() => keyCommand(parser, '   ')).toThrow(/empty/);
  });
  it('does not parse huge input: compound, verbatim', () => {
    const big = `echo ${'a'.repeat(70_000)}`;
    expect(keyCommand(parser, big).compound).toBe(true);
  });
  it('is reusable: many parses with one parser', () => {
    for (let i = 0; i < 500; i++) expect(keyCommand(parser, `git log -n ${i}`).key).toBe('run_command:git');
  });
});

describe('canonicalGrantKey', () => {
  it('keeps program and wildcard keys', () => {
    expect(canonicalGrantKey(parser, 'run_command:git')).toBe('run_command:git');
    expect(canonicalGrantKey(parser, 'run_command:*')).toBe('run_command:*');
    expect(canonicalGrantKey(parser, 'run_command:git:*')).toBe('run_command:git:*');
    expect(canonicalGrantKey(parser, 'run_capability:hello')).toBe('run_capability:hello');
  });
  it('normalizes a compound command', () => {
    expect(canonicalGrantKey(parser, 'run_command:git status   &&  ls')).toBe('run_command:git status && ls');
  });
  it('refuses a simple command with arguments (keys name the program)', () => {
    try {
      canonicalGrantKey(parser, 'run_command:git status');
      expect.unreachable();
    } catch (err) {
      expect(isCapsuleError(err, 'USAGE')).toBe(true);
      expect((err as Error).message).toContain('run_command:git');
    }
  });
  it('refuses a malformed key', () => {
    expect(() => canonicalGrantKey(parser, 'nocolon')).toThrow(/not a permission key/);
  });
});
