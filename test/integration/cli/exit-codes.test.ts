import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { withFileLock } from '../../../src/base/file-lock.js';
import { COMMAND_EXIT_CODES, EXIT, EXIT_CODES } from '../../../src/cli/exit-codes.js';
import { commandPath, leafCommands } from '../../../src/cli/help.js';
import { buildProgram } from '../../../src/cli/program.js';
import { BUILT_CLI, REPO_ROOT, cli, type CliRun } from '../../helpers/cli.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { eventually } from '../../helpers/eventually.js';
import { memoryIO } from '../../helpers/io.js';
import { killAll, processesWith } from '../../helpers/processes.js';

/** The rows of docs/cli.md's exit-code table: `| code | meaning |`. */
function docsTable(): Array<{ code: string; meaning: string }> {
  const text = readFileSync(path.join(REPO_ROOT, 'docs', 'cli.md'), 'utf8');
  const section = text.slice(text.indexOf('## Exit codes'));
  const table = section.slice(0, section.indexOf('\n\n', section.indexOf('| code')));
  return table
    .split('\n')
    .filter((l) => l.startsWith('|') && !/^\|\s*-/.test(l) && !/^\|\s*code\s*\|/.test(l))
    .map((l) => {
      const [, code = '', meaning = ''] = l.split('|').map((c) => c.trim());
      return { code, meaning };
    });
}

const projectWith = async (files: Record<string, string>): Promise<string> => {
  const { root } = await tempProject('capsule-exit-');
  for (const [name, text] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(root, name)), { recursive: true });
    await writeFile(path.join(root, name), text);
  }
  return root;
};

/** Each code of the table, caused for real by a command (70 is a bug in capsule: nothing causes it on purpose). */
const TRIGGERS: Array<{ code: number | '128+n'; why: string; run: () => Promise<CliRun> }> = [
  { code: EXIT.OK, why: 'key of a command', run: () => cli(['key', '--', 'ls']) },
  {
    code: EXIT.FAILURE,
    why: 'validate of an invalid manifest',
    run: () => cli(['validate', 'fixtures/hostile/entry-symlink']),
  },
  { code: EXIT.USAGE, why: 'an unknown command', run: () => cli(['bogus']) },
  {
    code: EXIT.DATA,
    why: 'an input that is not JSON',
    run: () => cli(['run', 'hello', '--grant', 'run_capability:hello', '--input', '{']),
  },
  { code: EXIT.NOT_FOUND, why: 'no such capability', run: () => cli(['show', 'no-such-capability']) },
  {
    code: EXIT.UNAVAILABLE,
    why: 'a docker capability with no engine',
    run: () =>
      cli(['run', 'hello-docker', '--grant', 'run_capability:hello-docker'], {
        env: {
          ...process.env,
          CAPSULE_ENGINES: undefined,
          CAPSULE_ENGINE: undefined,
          DOCKER_HOST: 'unix:///nonexistent/capsule-exit-codes.sock',
        },
      }),
  },
  {
    code: EXIT.EXISTS,
    why: 'a --junit file that exists, without --force',
    run: async () => {
      const root = await projectWith({ 'junit.xml': 'kept' });
      return cli(['ci', '--junit', 'junit.xml'], { cwd: root });
    },
  },
  {
    code: EXIT.LOCK_TIMEOUT,
    why: 'the audit log locked by another holder past the wait',
    run: async () => {
      const { root, capRoot } = await tempProject('capsule-exit-');
      await writeCapability(capRoot, 'hi', {}, { 'run.sh': 'echo hi\n' });
      const lock = path.join(root, '.capsule', 'audit.jsonl.lock');
      let out: CliRun | undefined;
      await withFileLock(lock, async () => {
        out = await cli(['run', 'hi', '--grant', 'run_capability:hi'], { cwd: root });
      });
      return out as CliRun;
    },
  },
  { code: EXIT.DENIED, why: 'a run not granted', run: () => cli(['run', 'hello', '--no-prompt']) },
  {
    code: EXIT.CONFIG,
    why: 'a capsule.json that is not JSON',
    run: async () => cli(['list'], { cwd: await projectWith({ 'capsule.json': '{bad' }) }),
  },
  {
    code: EXIT.TIMEOUT,
    why: 'exec past --timeout-ms',
    run: async () =>
      cli(['exec', '--grant', 'run_command:sleep', '--timeout-ms', '200', '--', 'sleep 20'], {
        cwd: (await tempProject('capsule-exit-')).root,
      }),
  },
  {
    code: EXIT.CANCELED,
    why: 'SIGINT of a running exec',
    run: async () => {
      const { root } = await tempProject('capsule-exit-');
      const n = `0.${Math.floor(Math.random() * 1e9)}`;
      const token = `900\u0000${n}`;
      const child = execa(
        'node',
        [BUILT_CLI, 'exec', '--grant', 'run_command:sleep', '--', `sleep 900 ${n}`],
        {
          cwd: root,
          reject: false,
          stdin: 'ignore',
        },
      );
      try {
        // Started: the command's process exists (an effect, not a delay).
        await eventually(() => processesWith(token).length > 0, 'the command started');
        child.kill('SIGINT');
        const r = await child;
        return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
      } finally {
        killAll(token);
      }
    },
  },
  {
    code: EXIT.LIMIT_KILLED,
    why: 'a run past limits.outputBytes',
    run: async () => {
      const { root, capRoot } = await tempProject('capsule-exit-');
      await writeCapability(capRoot, 'loud', { limits: { outputBytes: 1024 } }, { 'run.sh': 'yes\n' });
      return cli(['run', 'loud', '--grant', 'run_capability:loud'], { cwd: root });
    },
  },
  {
    code: '128+n',
    why: 'a command killed by SIGTERM (143)',
    run: async () => {
      const { root, capRoot } = await tempProject('capsule-exit-');
      await writeCapability(capRoot, 'stops', {}, { 'run.sh': "sh -c 'kill -TERM $$'\n" });
      return cli(['run', 'stops', '--grant', 'run_capability:stops'], { cwd: root });
    },
  },
];

describe('one exit-code table', () => {
  it('docs/cli.md prints the same table as src/cli/exit-codes.ts', () => {
    expect(docsTable()).toEqual(EXIT_CODES.map((r) => ({ code: String(r.code), meaning: r.meaning })));
  });

  it('every code has one meaning: no two rows share a code', () => {
    const codes = EXIT_CODES.map((r) => r.code);
    expect(new Set(codes).size).toBe(codes.length);
  });

  it("every command's --help ends with an Exit codes: section drawn from the table", async () => {
    const program = buildProgram(memoryIO({ cwd: REPO_ROOT, env: process.env }).io);
    const paths = leafCommands(program).map(commandPath);
    expect(Object.keys(COMMAND_EXIT_CODES).sort()).toEqual([...paths].sort());
    for (const p of paths) {
      const r = await cli([...p.split(' '), '--help'], { env: { ...process.env, COLUMNS: '100' } });
      expect(r.code, p).toBe(0);
      const section = r.stdout.slice(r.stdout.indexOf('\nExit codes:\n'));
      expect(section.length, `${p} --help has no Exit codes: section`).toBeGreaterThan(20);
      const listed = [...section.matchAll(/^ {2}(\d+|128\+n) /gm)].map((m) => m[1]);
      const known = EXIT_CODES.map((row) => String(row.code));
      for (const code of listed) expect(known, `${p} lists ${code}`).toContain(code);
      expect(listed.length, p).toBe(COMMAND_EXIT_CODES[p]?.length);
    }
  });

  it('every code but 70 (a bug) is caused for real by a command below', () => {
    const triggered = new Set(TRIGGERS.map((t) => t.code));
    const untriggered = EXIT_CODES.map((r) => r.code).filter((c) => !triggered.has(c));
    expect(untriggered).toEqual([EXIT.INTERNAL]);
  });

  it.each(TRIGGERS)(
    '$code: $why',
    async (t) => {
      const r = await t.run();
      if (t.code === '128+n') expect(r.code, t.why).toBe(128 + 15);
      else expect(r.code, `${t.why}: ${r.stderr}`).toBe(t.code);
    },
    60_000,
  );

  it('compare no longer exits an unlisted code', () => {
    const listed = new Set(EXIT_CODES.map((r) => r.code));
    for (const c of COMMAND_EXIT_CODES.compare ?? [])
      expect(listed.has(Array.isArray(c) ? c[0] : c)).toBe(true);
    expect(listed.has(2)).toBe(false);
  });
});
