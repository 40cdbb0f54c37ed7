import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { makeKey } from '../../../src/permissions/keys.js';
import {
  createNonInteractivePrompter,
  createTerminalPrompter,
  parseAnswer,
  type PromptQuestion,
} from '../../../src/permissions/prompter.js';

function question(project: boolean): PromptQuestion {
  return {
    request: {
      tool: 'run_capability',
      kind: 'OTHER',
      key: makeKey('run_capability', 'w'),
      subject: 'w',
      sandboxed: project,
    },
    key: 'run_capability:w',
    options: project
      ? ['Once', 'AlwaysThisSession', 'AlwaysThisProject', 'Deny']
      : ['Once', 'AlwaysThisSession', 'Deny'],
    ceiling: project ? { ceiling: 'project', reason: 'wasm' } : { ceiling: 'session', reason: 'shell' },
  };
}

function tty(): { input: PassThrough & { isTTY: boolean }; output: PassThrough; shown: () => string } {
  const input = Object.assign(new PassThrough(), { isTTY: true });
  const output = new PassThrough();
  let text = '';
  output.on('data', (c: Buffer) => (text += c.toString()));
  return { input, output, shown: () => text };
}

describe('prompters', () => {
  it('non-interactive: Deny, immediately', async () => {
    const p = createNonInteractivePrompter();
    expect(p.interactive).toBe(false);
    expect(await p.ask(question(true))).toBe('Deny');
  });

  it('terminal without a TTY: Deny without reading input (never hangs)', async () => {
    const input = new PassThrough(); // never written, never ended
    const p = createTerminalPrompter({ input, output: new PassThrough() });
    expect(p.interactive).toBe(false);
    expect(await p.ask(question(true))).toBe('Deny');
  });

  it('terminal: offers project only under the ceiling and returns the answer', async () => {
    const t = tty();
    const p = createTerminalPrompter(t);
    const answer = p.ask(question(true));
    t.input.write('p\n');
    expect(await answer).toBe('AlwaysThisProject');
    expect(t.shown()).toContain('[p] this project');

    const t2 = tty();
    const p2 = createTerminalPrompter(t2);
    const a2 = p2.ask(question(false));
    t2.input.write('p\ns\n'); // p is not offered: asked again; the typed-ahead s is not lost
    expect(await a2).toBe('AlwaysThisSession');
    expect(t2.shown()).not.toContain('[p]');
    expect(t2.shown()).toContain('please answer o/s/d');
    expect(t2.shown()).toContain('session grant at most');
  });

  it('terminal: end of input and an abort are denials', async () => {
    const t = tty();
    const a = createTerminalPrompter(t).ask(question(true));
    t.input.end();
    expect(await a).toBe('Deny');

    const t2 = tty();
    const ac = new AbortController();
    const a2 = createTerminalPrompter(t2).ask(question(true), ac.signal);
    ac.abort();
    expect(await a2).toBe('Deny');
  });

  it('parseAnswer: empty is deny; only offered answers count', () => {
    const opts = question(false).options;
    expect(parseAnswer('', opts)).toBe('Deny');
    expect(parseAnswer(' O ', opts)).toBe('Once');
    expect(parseAnswer('this session', opts)).toBe('AlwaysThisSession');
    expect(parseAnswer('p', opts)).toBeUndefined();
    expect(parseAnswer('yes', opts)).toBeUndefined();
  });
});
