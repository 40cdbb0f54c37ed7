import { existsSync } from 'node:fs';
import { mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Executor } from '../../../src/executor/executor.js';
import { Registry } from '../../../src/registry/registry.js';
import { createCommandParser, type CommandParser } from '../../../src/permissions/commands/parser.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import { createNonInteractivePrompter } from '../../../src/permissions/prompter.js';
import { createRunCommandTool } from '../../../src/tools/run-command.js';
import { Workspace } from '../../../src/tools/workspace.js';
import { MemoryAuditSink } from '../../../src/permissions/audit/memory-sink.js';
import { isCapsuleError } from '../../../src/base/errors.js';
import { holdsWithin } from '../../helpers/eventually.js';

let parser: CommandParser;
let root: string;
let marker: string;

beforeAll(async () => {
  parser = await createCommandParser();
  root = await realpath(await mkdtemp(path.join(tmpdir(), 'capsule-attack-')));
  marker = path.join(root, 'M');
});
afterAll(() => parser.close());
beforeEach(async () => {
  await rm(marker, { force: true });
});

/** Run a command through the real executor and gate; returns whether it was allowed. */
async function attempt(
  command: string,
  grants: string[],
  env?: NodeJS.ProcessEnv,
): Promise<'ran' | 'denied'> {
  const engine = await PermissionEngine.create({
    projectRoot: root,
    config: undefined,
    sessionGrants: grants,
    prompter: createNonInteractivePrompter(),
    audit: new MemoryAuditSink(),
    commandParser: parser,
  });
  const executor = new Executor({
    registry: new Registry({ roots: [], projectRoot: root }),
    gate: engine,
    runners: [],
  });
  const tool = createRunCommandTool({ env: env ?? process.env });
  const workspace = await Workspace.open({ projectRoot: root });
  try {
    await executor.call(tool, { command }, { workspace, commands: parser });
    return 'ran';
  } catch (err) {
    if (isCapsuleError(err, 'PERMISSION_DENIED')) return 'denied';
    throw err;
  }
}

/**
 * Process substitution and `&` may create the marker a moment after bash returns: waited for (bounded).
 * Where it must not appear, bash never ran (denied) or has returned past where it would have made it
 * (BASH_ENV runs first), so it is looked at once.
 */
const markerAppears = (): Promise<boolean> => holdsWithin(() => existsSync(marker), 30_000, 10);
const markerExists = (): boolean => existsSync(marker);

// Every compound form from issue 3; each creates the marker file M when bash runs it.
const FORMS: Array<[string, string]> = [
  ['and-list', 'git --version && touch M'],
  ['or-list', 'git --bogus-flag 2>/dev/null || touch M'],
  ['semicolon', 'git --version; touch M'],
  ['pipe', 'git --version | touch M'],
  ['background', 'git --version & touch M'],
  ['newline', 'git --version\ntouch M'],
  ['command substitution', 'git --version $(touch M)'],
  ['command substitution inside double quotes', 'git --version "$(touch M)"'],
  ['backticks', 'git --version `touch M`'],
  // git reads the substituted file to its end, so the substitution has run before the command ends
  // (whatever a command leaves running in the background dies with it).
  ['process substitution', 'git hash-object <(touch M)'],
  ['subshell', '(touch M)'],
  ['brace group', '{ touch M; }'],
  ['redirection', 'git --version > M'],
  ['here-doc', 'git --version <<EOF\n$(touch M)\nEOF'],
  ['here-string', 'git --version <<< $(touch M)'],
  ['variable in command position', '${T:-touch} M'],
  ['substitution in command position', '$(echo touch) M'],
];

describe.each([['run_command:git'], ['run_command:*'], ['run_command:git:*']])(
  'with the grant %s',
  (grant) => {
    it('a simple command it covers really runs (the harness can create the marker)', async () => {
      const simple = grant === 'run_command:*' ? 'touch M' : 'git --version';
      expect(await attempt(simple, [grant])).toBe('ran');
      if (grant === 'run_command:*') expect(existsSync(marker)).toBe(true);
    });

    it.each(FORMS)('%s is denied and never runs', async (_name, command) => {
      expect(await attempt(command, [grant])).toBe('denied');
      expect(markerExists()).toBe(false);
    });

    it('an env-var prefix is compound (GIT_TRACE would write the marker)', async () => {
      const command = `GIT_TRACE=${marker} git --version`;
      expect(await attempt(command, [grant])).toBe('denied');
      expect(markerExists()).toBe(false);
    });

    it('a parse error fails closed', async () => {
      expect(await attempt('git --version && touch M "', [grant])).toBe('denied');
      expect(existsSync(marker)).toBe(false);
    });
  },
);

describe('control: each form does create the marker once granted as its exact whole string', () => {
  it.each(FORMS)('%s', async (_name, command) => {
    const key = `run_command:${parser.analyze(command).normalized}`;
    expect(await attempt(command, [key])).toBe('ran');
    expect(await markerAppears()).toBe(true);
  });

  it('env-var prefix', async () => {
    const command = `GIT_TRACE=${marker} git --version`;
    expect(await attempt(command, [`run_command:${command}`])).toBe('ran');
    expect(await markerAppears()).toBe(true);
  });
});

describe('the environment cannot swap what a granted program runs', () => {
  it('an exported bash function named git, BASH_ENV and ENV are not honoured', async () => {
    await writeFile(path.join(root, 'evil.sh'), `touch ${marker}\n`);
    const env = {
      ...process.env,
      'BASH_FUNC_git%%': `() { touch ${marker}; }`,
      BASH_ENV: path.join(root, 'evil.sh'),
      ENV: path.join(root, 'evil.sh'),
    };
    expect(await attempt('git --version', ['run_command:git'], env)).toBe('ran');
    expect(markerExists()).toBe(false);
  });

  it('control: bash itself would honour them', async () => {
    const { execa } = await import('execa');
    await writeFile(path.join(root, 'evil.sh'), `touch ${marker}\n`);
    await execa('bash', ['-c', 'true'], { cwd: root, env: { BASH_ENV: path.join(root, 'evil.sh') } });
    expect(await markerAppears()).toBe(true);
  });
});
