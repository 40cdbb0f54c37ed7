import { describe, expect, it } from 'vitest';
import { closestNames, grantNeverMatches, ruleNeverMatches } from '../../../src/project/never-matches.js';

describe('grants that can never match', () => {
  it.each([
    ['bogus_tool', 'x', /not a tool/],
    ['read_file', 'x', /not a tool/],
    ['run_capability', 'Hello', /lower case/],
    ['run_capability', 'hel*', /one capability exactly/],
    ['run_capability', 'a b', /not a capability name/],
    ['run_capability', 'Hello:*', /lower case/],
    ['write_file', '/etc/**', /relative to the project root/],
    ['write_file', '../x', /relative to the project root/],
    ['write_file', 'src/../../x', /relative to the project root/],
    ['write_file', './src/a.ts', /relative to the project root/],
    ['generate_capability', 'python', /environment/],
    ['generate_capability', 'wasm:replace', /ENV:replace:NAME/],
    ['generate_capability', 'wasm:replace:Hello', /ENV:replace:NAME/],
    ['generate_capability', 'wasm:swap:hello', /ENV:replace:NAME/],
    ['generate_capability', 'python:replace:hello', /environment/],
  ])('%s:%s', (tool, action, why) => {
    expect(grantNeverMatches(tool, action)?.why).toMatch(why);
  });

  it.each([
    ['run_capability', '*'],
    ['run_capability', 'hello'],
    ['run_capability', 'hello:*'],
    ['write_file', 'src/**'],
    ['write_file', '*'],
    ['generate_capability', 'wasm'],
    ['generate_capability', 'wasm:*'],
    ['generate_capability', 'wasm:replace:hello'],
    ['generate_capability', 'shell:replace:*'],
    ['run_command', 'git'],
    ['run_command', 'git status && ls'],
  ])('%s:%s can match', (tool, action) => {
    expect(grantNeverMatches(tool, action)).toBeUndefined();
  });

  it('suggests the closest tool', () => {
    expect(grantNeverMatches('run_capabilty', 'x')?.hint).toContain('did you mean run_capability:x');
  });
});

describe('rules that can never match', () => {
  it.each([
    ['allow', 'run_command', 'gi* *', /names its program literally/],
    ['allow', 'run_command', '* --help', /names its program literally/],
    ['allow', 'bogus_tool', undefined, /not a tool/],
    ['deny', 'read_file', 'x', /not a tool/],
    ['deny', 'write_file', '/etc/**', /outside it/],
    ['allow', 'edit_file', '~/.bashrc', /outside it/],
    ['allow', 'run_capability', 'Hello', /matches none/],
    ['deny', 'run_capability', 'a.b', /matches none/],
    ['allow', 'generate_capability', 'python', /matches none/],
  ] as const)('%s %s(%s)', (kind, tool, pattern, why) => {
    expect(ruleNeverMatches(kind, tool, pattern)?.why).toMatch(why);
  });

  it.each([
    ['allow', 'run_command', '*'],
    ['allow', 'run_command', undefined],
    ['allow', 'run_command', 'git *'],
    ['deny', 'run_command', 'gi* *'],
    ['deny', 'run_command', '*rm *'],
    ['allow', 'write_file', 'src/**'],
    ['allow', 'run_capability', 'img-*'],
    ['allow', 'run_capability', '[a-c]*'],
    ['allow', 'generate_capability', 'sh*'],
    ['allow', 'generate_shell_capability', undefined],
  ] as const)('%s %s(%s) can match', (kind, tool, pattern) => {
    expect(ruleNeverMatches(kind, tool, pattern)).toBeUndefined();
  });
});

describe('closest names', () => {
  it('orders by distance and drops far ones', () => {
    expect(closestNames('helo', ['hello', 'help', 'world', 'zzzzzz'])).toEqual(['hello', 'help']);
    expect(closestNames('x', ['hello'])).toEqual([]);
  });
});
