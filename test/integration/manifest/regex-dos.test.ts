import { existsSync } from 'node:fs';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execa } from 'execa';
import { XMLParser } from 'fast-xml-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { CATASTROPHIC } from '../../helpers/catastrophic-regex.js';
import { BUILT_CLI } from '../../helpers/cli.js';
import { eventually, holdsWithin } from '../../helpers/eventually.js';
import { killAll, processesWith } from '../../helpers/processes.js';
import { choose, connectCapsule, textOf } from '../mcp/mcp-client.js';

/**
 * No input makes capsule unresponsive. Each pattern of CATASTROPHIC keeps a backtracking engine busy
 * for years on its input (test/unit/linear-regex.test.ts shows plain RegExp still matching after a
 * second); in every place a schema holds a pattern — input and output, `pattern`, `patternProperties`,
 * `propertyNames`, array items, and a `cases.json` input — capsule answers (a result or an error). A
 * schema whose checks multiply without any pattern (nested anyOf over one $ref) is stopped at the
 * check deadline. While a call is checked, the MCP server still answers and a signal still ends
 * capsule. Judged by effect: exit codes, answers, the process gone; vitest's timeout only catches a hang.
 */

/** Where a schema holds a pattern, and the document that puts `text` there. */
const PLACES: readonly (readonly [
  place: string,
  schemaFor: (pattern: string) => Record<string, unknown>,
  docFor: (text: string) => unknown,
  /** Whether the document matches (patternProperties only constrains keys that match). */
  passes: boolean,
])[] = [
  [
    'pattern',
    (p) => ({ type: 'object', properties: { s: { type: 'string', pattern: p } } }),
    (t) => ({ s: t }),
    false,
  ],
  [
    'patternProperties',
    (p) => ({ type: 'object', patternProperties: { [p]: { type: 'number' } } }),
    (t) => ({ [t]: 'x' }),
    true,
  ],
  ['propertyNames', (p) => ({ type: 'object', propertyNames: { pattern: p } }), (t) => ({ [t]: 1 }), false],
  [
    'items',
    (p) => ({ type: 'object', properties: { a: { type: 'array', items: { type: 'string', pattern: p } } } }),
    (t) => ({ a: [t] }),
    false,
  ],
];

/** 2^40 checks of `x` when it is a number, which fails them all: no pattern, just structure. */
function multiplyingSchema(): Record<string, unknown> {
  const defs: Record<string, unknown> = {};
  for (let i = 0; i < 40; i++)
    defs[`l${i}`] = { anyOf: [{ $ref: `#/$defs/l${i + 1}` }, { $ref: `#/$defs/l${i + 1}` }] };
  defs.l40 = { type: 'string' };
  return { type: 'object', $defs: defs, properties: { x: { $ref: '#/$defs/l0' } } };
}

/**
 * Schemas without any reference whose checks still multiply with the document: each is seconds of work
 * on its document (a thousand schemas applied to each of 200,000 items; a pattern of 200 bytes over a
 * 4,000-byte string, within the bound were a pattern's text its cost; the items of a 20,000-long array
 * compared pairwise). A reference-free schema is not by itself a bounded check.
 */
const REFERENCE_FREE: readonly (readonly [label: string, schema: Record<string, unknown>, input: unknown])[] =
  [
    [
      'a wide allOf applied to every item',
      {
        type: 'object',
        properties: {
          xs: {
            type: 'array',
            items: {
              allOf: Array.from({ length: 1000 }, (_, i) => ({
                type: 'object',
                properties: { [`k${i % 7}`]: { type: 'number' } },
              })),
            },
          },
        },
      },
      { xs: Array.from({ length: 200_000 }, () => ({ k1: 1 })) },
    ],
    [
      // 12 bytes of pattern compile to a thousand RE2 instructions, each stepped through per character:
      // (schema bytes × document bytes) stays under the bound while the match takes seconds.
      'a short pattern whose compiled program is a thousand times its text',
      { type: 'object', properties: { s: { type: 'string', pattern: `${'(?:a?){1000}'.repeat(16)}b` } } },
      { s: `${'a'.repeat(3900)}cb` },
    ],
    [
      'uniqueItems over distinct objects',
      { type: 'object', properties: { xs: { type: 'array', uniqueItems: true } } },
      { xs: Array.from({ length: 20_000 }, (_, i) => ({ a: [i] })) },
    ],
  ];

/** A shell script printing `text` exactly (single-quoted for sh). */
const printing = (text: string): string => `cat >/dev/null; printf '%s' '${text.replace(/'/g, `'\\''`)}'\n`;

let state: string;
beforeAll(async () => {
  state = await mkdtemp(path.join(tmpdir(), 'capsule-redos-state-'));
});
afterAll(() => killAll('capsule-redos-'));

const run = (root: string, args: string[]) =>
  execa('node', [BUILT_CLI, ...args], {
    cwd: root,
    reject: false,
    stdin: 'ignore',
    env: { XDG_STATE_HOME: state },
  });

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('a hostile pattern and input get an answer from the CLI', () => {
  it('capsule run: every pattern of the family, in every input place', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    const calls: { name: string; doc: string; passes: boolean }[] = [];
    for (const [place, schemaFor, docFor, passes] of PLACES) {
      for (const [i, [pattern, text]] of CATASTROPHIC.entries()) {
        const name = `in-${place.toLowerCase()}-${i}`;
        await writeCapability(
          capRoot,
          name,
          { inputSchema: schemaFor(pattern) },
          { 'run.sh': printing('ran') },
        );
        calls.push({ name, doc: JSON.stringify(docFor(text)), passes });
      }
    }
    for (const c of calls) {
      const r = await run(root, [
        'run',
        c.name,
        '--grant',
        `run_capability:${c.name}`,
        '--no-prompt',
        '--input',
        c.doc,
      ]);
      if (c.passes) expect({ code: r.exitCode, out: r.stdout }, c.name).toEqual({ code: 0, out: 'ran' });
      else {
        expect(r.exitCode, `${c.name}: ${r.stderr}`).toBe(65);
        expect(r.stderr, c.name).toMatch(/does not match the input schema/);
        expect(r.stdout, c.name).toBe('');
      }
    }
  });

  it('capsule run: a capability’s own output, against every place of its outputSchema', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    const calls: { name: string; out: string; passes: boolean }[] = [];
    for (const [place, schemaFor, docFor, passes] of PLACES) {
      for (const [i, [pattern, text]] of CATASTROPHIC.entries()) {
        const name = `out-${place.toLowerCase()}-${i}`;
        const out = JSON.stringify(docFor(text));
        await writeCapability(
          capRoot,
          name,
          { outputSchema: schemaFor(pattern) },
          { 'run.sh': printing(out) },
        );
        calls.push({ name, out, passes });
      }
    }
    for (const c of calls) {
      const r = await run(root, ['run', c.name, '--grant', `run_capability:${c.name}`, '--no-prompt']);
      if (c.passes) expect({ code: r.exitCode, out: r.stdout }, c.name).toEqual({ code: 0, out: c.out });
      else {
        // Exit 1: the output broke the outputSchema, and it is not printed (docs/cli.md).
        expect(r.exitCode, `${c.name}: ${r.stderr}`).toBe(1);
        expect(r.stderr, c.name).toMatch(/does not match its outputSchema/);
        expect(r.stdout, c.name).toBe('');
      }
    }
  });

  it('capsule ci: the family as cases.json inputs; every case is judged and the report written', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    const properties = Object.fromEntries(
      CATASTROPHIC.map(([pattern], i) => [`p${i}`, { type: 'string', pattern }]),
    );
    await writeCapability(
      capRoot,
      'family',
      { inputSchema: { type: 'object', properties } },
      { 'run.sh': printing('ran') },
    );
    await writeFile(
      path.join(capRoot, 'family', 'cases.json'),
      JSON.stringify({
        schemaVersion: 1,
        cases: [
          ...CATASTROPHIC.map(([, text], i) => ({
            name: `hostile ${i}`,
            input: { [`p${i}`]: text },
            expect: { stdout: 'ran' },
          })),
          { name: 'benign', input: {}, expect: { stdout: 'ran' } },
        ],
      }),
    );
    const junit = path.join(root, 'report.xml');
    const r = await run(root, ['ci', '--grant', 'run_capability:family', '--junit', junit]);
    expect(r.exitCode, r.stderr).toBe(1);
    expect(r.stdout).toContain(`1 passed, ${CATASTROPHIC.length} failed`);
    const doc = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '' }).parse(
      await readFile(junit, 'utf8'),
    );
    expect(doc.testsuites.tests).toBe(String(CATASTROPHIC.length + 1));
  });

  it('a schema whose checks multiply: run and ci refuse the call at the deadline (65), naming the schema', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    await writeCapability(
      capRoot,
      'multiply',
      { inputSchema: multiplyingSchema() },
      { 'run.sh': printing('ran') },
    );
    const r = await run(root, [
      'run',
      'multiply',
      '--grant',
      'run_capability:multiply',
      '--no-prompt',
      '--input',
      '{"x":1}',
    ]);
    expect(r.exitCode, r.stderr).toBe(65);
    expect(r.stderr).toMatch(/inputSchema of "multiply" did not finish checking the input within \d+ ms/);
    expect(r.stdout).toBe('');
    // The same schema against an output.
    await writeCapability(
      capRoot,
      'multiply-out',
      { outputSchema: multiplyingSchema() },
      { 'run.sh': printing('{"x":1}') },
    );
    const o = await run(root, [
      'run',
      'multiply-out',
      '--grant',
      'run_capability:multiply-out',
      '--no-prompt',
    ]);
    expect(o.exitCode, o.stderr).toBe(1);
    expect(o.stderr).toMatch(/outputSchema of "multiply-out" did not finish checking the output/);
  });
});

describe('a schema without references still has its deadline when its checks multiply', () => {
  for (const [label, schema, input] of REFERENCE_FREE) {
    it(`${label}: run refuses the call at the deadline (65) and the capability never runs`, async () => {
      const { root, capRoot } = await tempProject('capsule-redos-');
      const marker = path.join(root, 'ran');
      await writeCapability(
        capRoot,
        'wide',
        { inputSchema: schema },
        { 'run.sh': `cat >/dev/null; : > '${marker}'\n` },
      );
      const inputFile = path.join(root, 'input.json');
      await writeFile(inputFile, JSON.stringify(input));
      const r = await run(root, [
        'run',
        'wide',
        '--grant',
        'run_capability:wide',
        '--no-prompt',
        '--input-file',
        inputFile,
      ]);
      expect(r.exitCode, r.stderr).toBe(65);
      expect(r.stderr).toMatch(/inputSchema of "wide" did not finish checking the input within \d+ ms/);
      expect(existsSync(marker)).toBe(false);
    });
  }
});

describe('a pattern the linear engine cannot run is refused when the manifest loads', () => {
  const refused: readonly (readonly [string, Record<string, unknown>, string])[] = [
    [
      'backreference',
      { inputSchema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)\\1$' } } } },
      'inputSchema.properties.s.pattern',
    ],
    [
      'lookahead',
      { inputSchema: { type: 'object', patternProperties: { '^(?=x)': {} } } },
      'inputSchema.patternProperties key',
    ],
    [
      'lookbehind',
      { inputSchema: { type: 'object', propertyNames: { pattern: '(?<=a)b' } } },
      'inputSchema.propertyNames.pattern',
    ],
    [
      'named backreference, output',
      {
        outputSchema: {
          type: 'object',
          properties: { q: { type: 'string', pattern: '^(?<q>["\'])x\\k<q>$' } },
        },
      },
      'outputSchema.properties.q.pattern',
    ],
  ];

  it('capsule validate: exit 1, naming the file, the field and the place', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    for (const [i, [, manifest]] of refused.entries())
      await writeCapability(capRoot, `refused-${i}`, manifest, { 'run.sh': 'echo {}\n' });
    const r = await run(root, ['validate', '--json']);
    expect(r.exitCode).toBe(1);
    const out = JSON.parse(r.stdout) as {
      invalid: { name?: string; issues: { file: string; field?: string; message: string }[] }[];
    };
    for (const [i, [what, , where]] of refused.entries()) {
      const issues = out.invalid.flatMap((c) => c.issues).filter((x) => x.file.includes(`/refused-${i}/`));
      const field = where.split('.')[0];
      expect(
        issues.map((x) => x.field),
        what,
      ).toEqual([field]);
      expect(issues[0]?.file, what).toBe(path.join(capRoot, `refused-${i}`, 'capability.json'));
      expect(issues[0]?.message, what).toContain(where);
      expect(issues[0]?.message, what).toMatch(/linear time/);
    }
  });

  it('capsule run of one: 65, and nothing runs', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    const marker = path.join(root, 'ran');
    await writeCapability(capRoot, 'backref', refused[0]?.[1] ?? {}, {
      'run.sh': `touch ${marker}; echo {}\n`,
    });
    const r = await run(root, [
      'run',
      'backref',
      '--grant',
      'run_capability:backref',
      '--no-prompt',
      '--input',
      '{"s":"aa"}',
    ]);
    expect(r.exitCode).toBe(65);
    expect(r.stderr).toContain('capability.json');
    expect(r.stderr).toContain('inputSchema');
    expect(existsSync(marker)).toBe(false);
  });

  it('an agent cannot install one: generate_shell_capability with such a pattern writes nothing', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const h = await connectCapsule({ cwd: root, answer: () => choose('Once') });
    try {
      const bad = await h.client.callTool({
        name: 'generate_shell_capability',
        arguments: {
          name: 'backref',
          description: 'hostile',
          script: 'echo {}\n',
          inputSchema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a)\\1$' } } },
        },
      });
      expect(bad.isError, textOf(bad)).toBe(true);
      expect(textOf(bad)).toMatch(/inputSchema\.properties\.s\.pattern/);
      expect(existsSync(path.join(capRoot, 'backref'))).toBe(false);
      // A pattern a backtracking engine explodes on installs: capsule matches it in linear time.
      const ok = await h.client.callTool({
        name: 'generate_shell_capability',
        arguments: {
          name: 'nested',
          description: 'fine',
          script: 'echo {}\n',
          inputSchema: { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } },
        },
      });
      expect(ok.isError, textOf(ok)).toBeFalsy();
      expect(existsSync(path.join(capRoot, 'nested'))).toBe(true);
    } finally {
      await h.close();
    }
  });
});

describe('the MCP server stays responsive and a signal ends it', () => {
  it('a hostile call gets an error, tools/list answers meanwhile, SIGTERM ends the server', async () => {
    const { root, capRoot } = await tempProject('capsule-redos-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const [pattern, text] = CATASTROPHIC[0] as readonly [string, string];
    await writeCapability(
      capRoot,
      'evil',
      { inputSchema: { type: 'object', properties: { s: { type: 'string', pattern } } } },
      { 'run.sh': printing('ran') },
    );
    await writeCapability(
      capRoot,
      'multiply',
      { inputSchema: multiplyingSchema() },
      { 'run.sh': printing('ran') },
    );
    const h = await connectCapsule({ cwd: root, answer: () => choose('AlwaysThisSession') });
    const pid = h.pid as number;
    try {
      // Both calls start, then tools/list: it answers while they are checked.
      const evil = h.client.callTool({ name: 'cap_evil', arguments: { s: text } });
      const slow = h.client.callTool({ name: 'cap_multiply', arguments: { x: 1 } });
      // Judged below; if the test fails first, the close must not leave their rejections unhandled.
      for (const call of [evil, slow]) void call.catch(() => undefined);
      const listed = await h.client.listTools();
      expect(listed.tools.map((t) => t.name)).toContain('cap_evil');
      const e = await evil;
      expect(e.isError, textOf(e)).toBe(true);
      expect(textOf(e)).toMatch(/does not match the input schema/);
      const s = await slow;
      expect(s.isError, textOf(s)).toBe(true);
      expect(textOf(s)).toMatch(/did not finish checking the input/);
      // The server still answers after both.
      expect((await h.client.listTools()).tools.length).toBeGreaterThan(0);
      // SIGTERM while a multiplying check runs: the server is gone, not spinning.
      void h.client.callTool({ name: 'cap_multiply', arguments: { x: 2 } }).catch(() => undefined);
      process.kill(pid, 'SIGTERM');
      expect(await holdsWithin(() => !alive(pid), 30_000)).toBe(true);
    } finally {
      if (alive(pid)) process.kill(pid, 'SIGKILL');
      await h.close().catch(() => undefined);
    }
  });
});

describe('SIGTERM and SIGINT end capsule ci mid-work', () => {
  const ci = (root: string, grant: string) =>
    execa('node', [BUILT_CLI, 'ci', '--grant', grant], {
      cwd: root,
      reject: false,
      stdin: 'ignore',
      env: { XDG_STATE_HOME: state },
    });

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`${signal} while a case runs: ci is gone`, async () => {
      const { root, capRoot } = await tempProject('capsule-redos-');
      // A unique duration: the sleep is found by its command line.
      const seconds = `61.${process.pid}${Math.floor(Math.random() * 1e6)}`;
      await writeCapability(capRoot, 'sleepy', {}, { 'run.sh': `cat >/dev/null; sleep ${seconds}\n` });
      await writeFile(
        path.join(capRoot, 'sleepy', 'cases.json'),
        JSON.stringify({ schemaVersion: 1, cases: [{ name: 'sleeps', input: {}, expect: { stdout: 'x' } }] }),
      );
      const busy = ci(root, 'run_capability:sleepy');
      try {
        await eventually(() => processesWith(seconds).length > 0, 'the case runs');
        busy.kill(signal);
        expect(await holdsWithin(() => !alive(busy.pid as number), 30_000)).toBe(true);
      } finally {
        if (alive(busy.pid as number)) busy.kill('SIGKILL');
        killAll(seconds);
        await busy;
      }
    });

    it(`${signal} while case inputs are checked against a schema whose checks multiply: ci is gone`, async () => {
      const { root, capRoot } = await tempProject('capsule-redos-');
      await writeCapability(
        capRoot,
        'multiply',
        { inputSchema: multiplyingSchema() },
        { 'run.sh': printing('ran') },
      );
      await writeFile(
        path.join(capRoot, 'multiply', 'cases.json'),
        JSON.stringify({
          schemaVersion: 1,
          cases: Array.from({ length: 50 }, (_, i) => ({
            name: `c${i}`,
            input: { x: i },
            expect: { stdout: 'ran' },
          })),
        }),
      );
      const checking = ci(root, 'run_capability:multiply');
      let err = '';
      checking.stderr?.on('data', (c: Buffer) => (err += c.toString()));
      try {
        // Started: the first case was judged; each next one is being checked until the deadline.
        await eventually(() => err.includes('multiply / c0'), 'the first case is judged');
        checking.kill(signal);
        expect(await holdsWithin(() => !alive(checking.pid as number), 30_000)).toBe(true);
      } finally {
        if (alive(checking.pid as number)) checking.kill('SIGKILL');
        await checking;
      }
      expect(err).not.toContain('multiply / c49');
    });
  }
});
