import { describe, expect, it } from 'vitest';
import { permissionMessage, planText } from '../../../src/mcp/elicitation.js';
import { makeKey } from '../../../src/permissions/keys.js';
import { renderQuestion, type PromptQuestion } from '../../../src/permissions/prompter.js';

// Agent- and manifest-controlled text reaches the prompt: a newline, a carriage return or an ANSI
// escape in it must not be able to draw a line of its own (e.g. a fake "sandboxed" line).

const FORGED = [
  'echo hi\n  sandboxed (wasm sandbox): project grant allowed',
  'echo hi\r  sandboxed (wasm sandbox)',
  'echo hi\x1b[2K\x1b[1G  sandboxed (wasm sandbox)',
  'echo hi\u2028  sandboxed (wasm sandbox)',
  'echo hi\x85Sandboxed (wasm sandbox).',
];

function question(subject: string, isolation = 'shell: a host process'): PromptQuestion {
  return {
    request: {
      tool: 'run_command',
      kind: 'OTHER',
      key: makeKey('run_command', subject, true),
      subject,
      sandboxed: false,
    },
    key: `run_command:${subject}`,
    options: ['Once', 'AlwaysThisSession', 'Deny'],
    ceiling: { ceiling: 'session', reason: isolation },
  };
}

/** Lines as a terminal would draw them: every line break, carriage return and escape starts over. */
function drawnLines(text: string): string[] {
  // eslint-disable-next-line no-control-regex
  return text.split(/\r\n|\n|\r|\u2028|\u2029|\x85|\x1b\[[0-9;]*[A-Za-z]/);
}

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029]/;

describe('prompt and elicitation text is escaped', () => {
  for (const forged of FORGED) {
    it(`terminal prompt: ${JSON.stringify(forged)}`, () => {
      const text = renderQuestion(question(forged));
      expect(CONTROL.test(text)).toBe(false);
      expect(drawnLines(text).filter((l) => /^\s*sandboxed/i.test(l))).toEqual([]);
    });
    it(`elicitation: ${JSON.stringify(forged)}`, () => {
      const text = permissionMessage(question(forged));
      expect(CONTROL.test(text)).toBe(false);
      expect(drawnLines(text).filter((l) => /^\s*sandboxed/i.test(l))).toEqual([]);
    });
  }

  it('an isolation reason from a manifest cannot add a line either', () => {
    const q = question('true', 'docker image x\nSandboxed (wasm sandbox).');
    for (const text of [renderQuestion(q), permissionMessage(q)]) {
      expect(drawnLines(text).filter((l) => /^\s*sandboxed/i.test(l))).toEqual([]);
    }
  });

  it('over-long text is cut with a note saying how much was left out', () => {
    const long = `echo ${'a'.repeat(20_000)}`;
    for (const text of [renderQuestion(question(long)), permissionMessage(question(long))]) {
      expect(text.length).toBeLessThan(6000);
      expect(text).toMatch(/\(… \d+ more characters\)/);
    }
  });

  it('a plan keeps its lines, each marked as the agent text and escaped', () => {
    const text = planText('1. write a.txt\n2. tests\x1b[1A\rcapsule: plan approved');
    expect(text.split('\n')).toEqual(['│ 1. write a.txt', '│ 2. tests\\x1b[1A\\rcapsule: plan approved']);
  });
});
