import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCommandParser, type CommandParser } from '../../../src/permissions/commands/parser.js';
import { commandPermissionKey } from '../../../src/permissions/commands/permission.js';
import { GlobCache } from '../../../src/base/glob.js';
import { judgeDenyRule, parseRule } from '../../../src/permissions/rules.js';
import type { PermissionRequest } from '../../../src/permissions/types.js';
import { isCapsuleError } from '../../../src/base/errors.js';

let parser: CommandParser;
beforeAll(async () => {
  parser = await createCommandParser();
});
afterAll(() => parser.close());

function request(command: string): PermissionRequest {
  const analysis = parser.analyze(command);
  return {
    tool: 'run_command',
    kind: 'OTHER',
    key: commandPermissionKey(analysis),
    subject: analysis.normalized,
    sandboxed: false,
    parts: analysis.parts,
    commands: analysis.facts,
  };
}

const judge = (rule: string, command: string) =>
  judgeDenyRule(parseRule(rule, 'test', 'process', 'deny'), request(command), new GlobCache());

describe('a deny rule judges what a program capsule has no model of may run', () => {
  it.each([
    ['run_command(rm *)', 'setpriv rm v'],
    ['run_command(rm *)', 'setpriv --reuid 0 --regid 0 --clear-groups rm -f v'],
    ['run_command(rm *)', 'perf stat -o /dev/null rm v'],
    ['run_command(rm *)', "sg root -c 'rm v'"],
    ['run_command(rm *)', 'setpriv /bin/rm v'],
    ['run_command(rm *)', 'setpriv find . -delete'],
    ['run_command(rm *)', "setpriv env -S 'rm v'"],
    ['run_command(rm *)', 'setpriv $x v'],
    ['run_command(rm -rf *)', 'setpriv rm --force --recursive d'],
    ['run_command(git push*)', 'setpriv git -C . push origin x'],
    ['run_command(git push*)', "./tool 'git push'"],
    ['run_command(rm *)', 'node -e 1'],
    ['run_command(rm *)', "python3 -c 'print(1)'"],
    // A glob may expand to a file named rm; a brace expansion or variable to any word.
    ['run_command(rm *)', './tool *'],
    ['run_command(rm *)', './tool r*'],
    ['run_command(rm *)', './tool {rm,x}'],
    ['run_command(rm *)', './tool *.ts $x'],
  ])('%s: %s is not proven clear (asked)', (rule, command) => {
    expect(judge(rule, command).match).toBe('maybe');
  });

  it.each([
    ['run_command(rm *)', 'setpriv ls v'],
    ['run_command(rm *)', 'setpriv --reuid 0 ls'],
    ['run_command(rm *)', './tool --output rm.txt'],
    ['run_command(rm *)', "./tool --message 'fix the build step'"],
    ['run_command(rm -rf *)', 'setpriv rm v'],
    ['run_command(git push*)', 'setpriv git status'],
    ['run_command(rm *)', 'echo rm v'],
    ['run_command(rm *)', 'grep -r rm .'],
    ['run_command(rm *)', 'git rm --cached v'],
    ['run_command(rm *)', 'node --version'],
    ['run_command(rm *)', './tool *.ts'],
    ['run_command(rm *)', 'eslint src/*/*.ts lib/*.js'],
    ['run_command(rm *)', "curl -sS 'https://example.com/a?b=1&c=2'"],
  ])('%s: %s is clear', (rule, command) => {
    expect(judge(rule, command).match).toBe('no');
  });

  it.each([
    ['run_command(rm *)', 'env rm v'],
    ['run_command(rm *)', "sh -c 'rm v'"],
    ['run_command(rm *)', "script -qc 'rm v' /dev/null"],
    ['run_command(rm -rf *)', 'rm -Rf d'],
  ])('%s: %s certainly matches (denied)', (rule, command) => {
    expect(judge(rule, command).match).toBe('yes');
  });

  it('the reason names the program and what it may run', () => {
    const j = judge('run_command(rm *)', 'setpriv --reuid 0 rm v');
    expect(j).toEqual({
      match: 'maybe',
      why: 'setpriv is not known to keep its arguments from running: it may run "rm v"',
    });
  });
});

describe('parseRule refuses a rule that can never match when it knows its kind', () => {
  it('an allow rule with a pattern for a program', () => {
    let err: unknown;
    try {
      parseRule('run_command(gi* *)', 'capsule.json', 'persistent', 'allow');
    } catch (e) {
      err = e;
    }
    expect(isCapsuleError(err, 'CONFIG_INVALID')).toBe(true);
    expect((err as Error).message).toContain('can never match');
    // The same pattern is a meaningful deny rule.
    expect(parseRule('run_command(gi* *)', 'capsule.json', 'persistent', 'deny').pattern).toBe('gi* *');
  });
});
