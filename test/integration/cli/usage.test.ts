import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../../src/cli/program.js';
import { tempProject } from '../../helpers/capability.js';
import { builtCli, cli } from '../../helpers/cli.js';
import { memoryIO } from '../../helpers/io.js';
import { assemble } from '../runners/wasm/helpers.js';

function program(): Command {
  return buildProgram(memoryIO({ cwd: process.cwd(), env: {} }).io);
}

/** Every command that does something: the leaves of the tree, by their full name. */
function leaves(command: Command, prefix: string[] = []): { name: string[]; command: Command }[] {
  if (command.commands.length === 0) return [{ name: prefix, command }];
  return command.commands.flatMap((c) => leaves(c, [...prefix, c.name()]));
}

// `capsule mcp` speaks JSON-RPC on stdout: a --json flag would mean nothing there (docs/cli.md).
const NOT_JSON = new Set(['mcp']);

describe('--json on every command', () => {
  const all = leaves(program());

  it('finds the commands (the walk itself works)', () => {
    expect(all.map((l) => l.name.join(' '))).toEqual(
      expect.arrayContaining(['list', 'wasm run', 'images build', 'grants revoke', 'audit reset']),
    );
  });

  it.each(
    all.filter((l) => !NOT_JSON.has(l.name.join(' '))).map((l) => [l.name.join(' '), l.command] as const),
  )('capsule %s has --json', (_, command) => {
    expect(command.options.map((o) => o.long)).toContain('--json');
  });
});

interface JsonError {
  error: { code: string; message: string; hint?: string };
}

describe('usage errors honour --json', () => {
  const CASES: { args: string[]; message: RegExp }[] = [
    { args: ['list', '--json', '--bogus'], message: /unknown option '--bogus'/ },
    { args: ['show', '--json'], message: /missing required argument 'name'/ },
    { args: ['run', 'x', '--json', '--mode', 'nope'], message: /'nope' is invalid/ },
    { args: ['grants', 'revoke', '--json'], message: /missing required argument 'key'/ },
    { args: ['wasm', 'run', '--json'], message: /missing required argument 'module'/ },
    { args: ['lst', '--json'], message: /^unknown command 'lst'$/ },
  ];

  it.each(CASES.map((c) => [c.args.join(' '), c] as const))('capsule %s', async (_, c) => {
    const r = await cli(c.args);
    expect(r.code).toBe(64);
    expect(r.stderr).toBe('');
    const doc = JSON.parse(r.stdout) as JsonError;
    expect(doc.error.code).toBe('USAGE');
    expect(doc.error.message).toMatch(c.message);
  });

  it("keeps commander's suggestion, as the hint", async () => {
    const doc = JSON.parse((await cli(['lst', '--json'])).stdout) as JsonError;
    expect(doc.error.hint).toMatch(/Did you mean list\?/);
  });

  it('without --json, the same mistake stays text on stderr, stdout empty', async () => {
    const r = await cli(['list', '--bogus']);
    expect(r).toMatchObject({ code: 64, stdout: '' });
    expect(r.stderr).toMatch(/unknown option '--bogus'/);
  });

  it('a --json after -- is a word of the command, not capsule flag', async () => {
    const r = await cli(['key', '--', 'jq', '--json', '.']);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toMatch(/^\{/);
  });

  it('the built binary prints the JSON error too', async () => {
    const r = await builtCli(['list', '--json', '--bogus']);
    expect(r.code).toBe(64);
    expect((JSON.parse(r.stdout) as JsonError).error).toMatchObject({ code: 'USAGE' });
  });
});

/** The words of a help text, in order (what wrapping must keep intact). */
const words = (text: string): string[] => text.split(/\s+/).filter(Boolean);

async function help(args: string[], columns: number): Promise<string> {
  const r = await cli([...args, '--help'], { env: { ...process.env, COLUMNS: String(columns) } });
  expect(r.code).toBe(0);
  return r.stdout;
}

describe('help wraps at word boundaries at any width', () => {
  const names = [[], ...leaves(program()).map((l) => l.name)];

  it.each([30, 50, 80])(
    'COLUMNS=%i: no word split, no line past the width unless it is one word',
    async (width) => {
      for (const name of names) {
        const wrapped = await help(name, width);
        const unwrapped = await help(name, 100_000);
        expect(words(wrapped), `capsule ${name.join(' ')} --help`).toEqual(words(unwrapped));
        for (const line of wrapped.split('\n')) {
          if (line.length > width)
            expect(words(line), `${JSON.stringify(line)} is longer than ${width}`).toHaveLength(1);
        }
      }
    },
  );
});

describe('the commands that lacked --json print one JSON document', () => {
  it('grants revoke --json: {file, revoked}, and the entry is gone from capsule.json', async () => {
    const { root } = await tempProject('capsule-revoke-json-');
    const file = path.join(root, 'capsule.json');
    await writeFile(
      file,
      JSON.stringify({ schemaVersion: 1, allowlist: { 'write_file:notes.md': 'AlwaysThisProject' } }),
    );
    const r = await cli(['grants', 'revoke', 'write_file:notes.md', '--json'], { cwd: root });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ file, revoked: 'write_file:notes.md' });
    expect(await readFile(file, 'utf8')).not.toContain('write_file:notes.md');
    const again = await cli(['grants', 'revoke', 'write_file:notes.md', '--json'], { cwd: root });
    expect(again.code).toBe(66);
    expect((JSON.parse(again.stdout) as JsonError).error.code).toBe('NOT_FOUND');
  });

  it('audit reset --json: {file, movedTo}, and the old log is kept where it says', async () => {
    const { root } = await tempProject('capsule-reset-json-');
    const log = path.join(root, '.capsule', 'audit.jsonl');
    await mkdir(path.dirname(log), { recursive: true });
    await writeFile(log, 'not a chain\n');
    const env = { ...process.env, CAPSULE_STATE_DIR: path.join(root, '..', `${path.basename(root)}-state`) };
    const r = await cli(['audit', 'reset', '--json'], { cwd: root, env });
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as { file: string; movedTo: string };
    expect(doc.file).toBe(log);
    expect(await readFile(doc.movedTo, 'utf8')).toBe('not a chain\n');
  });

  it('wasm run --json: the result with stdout and stderr as text, and the exit code unchanged', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'capsule-wasm-json-'));
    const probe = path.join(dir, 'probe.wasm');
    await writeFile(probe, assemble('probe.wat'));
    const r = await builtCli(['wasm', 'run', '--json', probe, '--', 'xit', '7']);
    expect(r.code).toBe(7);
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toMatchObject({
      module: probe,
      exitCode: 7,
      stdout: '',
      stderr: 'bye\n',
      timedOut: false,
    });
  });

  it('images build --json: [{tag, built}] for the images asked for', async () => {
    const r = await builtCli(['images', 'build', 'capsule/busybox:1', '--json']);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as { tag: string; built: boolean }[];
    expect(doc.map((d) => d.tag)).toEqual(['capsule/busybox:1']);
    expect(typeof doc[0]?.built).toBe('boolean');
  });
});

describe('a description is prose, not its source lines', () => {
  it('at any width, no line of a command description ends mid-sentence where its source string was split', async () => {
    for (const { name } of [{ name: [] as string[] }, ...leaves(program())]) {
      const r = await cli([...name, '--help'], { env: { ...process.env, COLUMNS: '100000' } });
      // The description: the paragraph after "Usage:", up to the first blank line.
      const [, description = ''] = r.stdout.split(/\n\n/);
      const lines = description.split('\n');
      for (const line of lines.slice(0, -1))
        expect(line, `capsule ${name.join(' ')} --help: "${line}"`).toMatch(/[.:!?)]$/);
    }
  });
});
