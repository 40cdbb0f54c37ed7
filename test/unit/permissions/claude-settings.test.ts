import { describe, expect, it } from 'vitest';
import { mapClaudeRule, planClaudeImport } from '../../../src/permissions/claude-settings.js';

const where = { projectRoot: '/p', settingsFile: '/p/.claude/settings.json', home: '/home/u' };

describe('Claude Code rules in capsule.json terms', () => {
  const table: Array<[kind: 'allow' | 'deny' | 'ask', text: string, outcome: string, rules: string[]]> = [
    ['deny', 'Bash(rm:*)', 'import', ['run_command(rm)', 'run_command(rm *)']],
    ['deny', 'Bash(git push *)', 'import', ['run_command(git push)', 'run_command(git push *)']],
    ['deny', 'Bash(curl * | sh)', 'import', ['run_command(curl * | sh)']],
    ['deny', 'Bash(echo [x]?)', 'import', ['run_command(echo \\[x\\]\\?)']],
    ['deny', 'Bash', 'import', ['run_command']],
    ['deny', 'Edit(./secrets/**)', 'import', ['write_file(secrets/**)']],
    ['deny', 'Write(/config/*.json)', 'import', ['write_file(config/*.json)']],
    ['deny', 'Edit(*.env)', 'import', ['write_file(*.env)']],
    ['deny', 'Edit(//p/keys/**)', 'import', ['write_file(keys/**)']],
    ['deny', 'Edit(//etc/**)', 'nothing-to-do', []],
    ['deny', 'Edit(~/x)', 'nothing-to-do', []],
    ['deny', 'Edit(../up/**)', 'nothing-to-do', []],
    ['deny', 'Edit', 'import', ['write_file']],
    ['allow', 'Bash(npm test:*)', 'left-out', ['run_command(npm test)', 'run_command(npm test *)']],
    ['allow', 'Edit(./src/**)', 'left-out', ['write_file(src/**)']],
    ['allow', 'Bash(gi* status)', 'unmapped', ['run_command(gi* status)']],
    ['allow', 'mcp__capsule__run_capability(w*)', 'import', ['run_capability(w*)']],
    ['allow', 'mcp__capsule__run_command', 'left-out', ['run_command']],
    ['allow', 'mcp__github__create_issue', 'unmapped', []],
    ['allow', 'Read(./src/**)', 'nothing-to-do', []],
    ['deny', 'Read(./.env)', 'unmapped', []],
    ['deny', 'WebFetch(domain:evil.example)', 'unmapped', []],
    ['allow', 'Task', 'unmapped', []],
    ['ask', 'Bash(git push:*)', 'nothing-to-do', ['run_command(git push)', 'run_command(git push *)']],
    ['deny', 'not a rule(', 'unmapped', []],
  ];
  it.each(table)('%s %s → %s', (kind, text, outcome, rules) => {
    const e = mapClaudeRule(kind, text, where);
    expect({ outcome: e.outcome, rules: e.rules }).toEqual({ outcome, rules });
    expect(e.why.length).toBeGreaterThan(0);
  });

  it('a host allow is never in the plan; rules already in capsule.json or given twice are written once', () => {
    const plan = planClaudeImport(
      {
        permissions: {
          allow: ['Bash(make:*)', 'Edit', 'mcp__capsule__run_capability'],
          deny: ['Bash(rm:*)', 'Bash(rm *)', 'Edit(./a/**)'],
          ask: [],
        },
      },
      where,
      { allow: [], deny: ['write_file(a/**)'] },
    );
    expect(plan.allow).toEqual(['run_capability']);
    expect(plan.deny).toEqual(['run_command(rm)', 'run_command(rm *)']);
    expect(plan.entries.find((e) => e.text === 'Bash(rm *)')).toMatchObject({
      outcome: 'nothing-to-do',
      why: 'already in capsule.json',
    });
    expect(plan.entries.find((e) => e.text === 'Edit(./a/**)')?.outcome).toBe('nothing-to-do');
  });
});
