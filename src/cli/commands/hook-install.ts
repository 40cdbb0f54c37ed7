// `capsule hook claude --install / --uninstall`, loaded only when asked for (see hook.ts).
import { createHash } from 'node:crypto';
import { mkdir, rmdir, stat, unlink } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import {
  readClaudeSettingsDocument,
  type ClaudeSettingsDocument as ClaudeSettings,
} from '../../permissions/claude-settings.js';
import { writeFileAtomic } from '../../base/atomic-write.js';
import type { StateKey } from '../../project/state-key.js';
import { userStateDir } from '../../base/user-state.js';
import { CapsuleError, isCapsuleError } from '../../base/errors.js';
import { readOptionalFile } from '../../base/optional-file.js';
import { openProjectAt } from '../../runtime/runtime.js';
import { openStateKey } from '../../runtime/state.js';
import { shellWord } from '../../base/shell-quote.js';
import { unifiedDiff } from '../../base/text-diff.js';
import { EXIT } from '../exit-codes.js';
import { json, write, type CliIO } from '../output.js';

/** The flags of `capsule hook claude` (commander's parse). */
export interface HookCommandOptions {
  confine?: boolean;
  install?: boolean;
  uninstall?: boolean;
  project?: boolean;
  user?: boolean;
  yes?: boolean;
  json?: boolean;
}

/** The tools the installed hook is asked about (Claude Code reads the matcher as a regular expression). */
export const HOOK_MATCHER = 'Bash|Read|Edit|Write|MultiEdit|NotebookEdit|Glob|Grep|LS';
/** Seconds Claude Code waits for the hook before it gives up on it. */
const HOOK_TIMEOUT_S = 30;
/** Where capsule remembers what a settings file held before --install (per-user state). */
const INSTALLS_DIR = 'claude-hook-installs';

/** capsule's hook command, as --install writes it and --uninstall finds it. */
const OURS = /(?:^|[\s'"/])(?:capsule|main\.js)'?\s+hook\s+claude(?:\s|$)/;

const installRecordSchema = z.strictObject({
  schemaVersion: z.literal(1).describe('Version of this document.'),
  file: z.string().describe('The settings file --install wrote.'),
  before: z.string().nullable().describe('Its exact text before (null: it did not exist).'),
  createdDir: z.boolean().describe('--install made its .claude folder.'),
  after: z.string().describe('SHA-256 of the text --install wrote.'),
  mac: z.string().describe("HMAC with capsule's per-user key."),
});
type InstallRecord = z.infer<typeof installRecordSchema>;

const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

/** The command Claude Code runs: this very capsule, by absolute paths (no PATH lookup). */
function hookCommand(confine: boolean): string {
  const main = process.argv[1] ?? 'capsule';
  return `${shellWord(process.execPath)} ${shellWord(main)} hook claude${confine ? ' --confine' : ''}`;
}

function readText(file: string): Promise<string | undefined> {
  return readOptionalFile(
    file,
    'utf8',
    (err) =>
      new CapsuleError('CONFIG_INVALID', `Cannot read ${file}: ${err.message}`, { file }, { cause: err }),
  );
}

async function parseSettings(file: string, text: string | undefined): Promise<ClaudeSettings> {
  if (text === undefined) return {};
  try {
    // Validated as settings, but kept as written: schema defaults must not creep into the person's file.
    const read = await readClaudeSettingsDocument(file);
    return read === undefined || read.text.trim() === '' ? {} : (JSON.parse(read.text) as ClaudeSettings);
  } catch (err) {
    if (!isCapsuleError(err)) throw err;
    throw new CapsuleError(
      'CONFIG_INVALID',
      err.message,
      { ...err.details, hint: 'Fix the file by hand first; nothing was written.' },
      { cause: err },
    );
  }
}

interface Entry {
  hooks?: unknown;
}

const isOurs = (entry: unknown): boolean =>
  Array.isArray((entry as Entry | null)?.hooks) &&
  ((entry as Entry).hooks as unknown[]).some((h) => {
    const command = (h as { command?: unknown } | null)?.command;
    return typeof command === 'string' && OURS.test(command);
  });

function preToolUse(settings: ClaudeSettings): unknown[] {
  const list = settings.hooks?.PreToolUse;
  if (list === undefined) return [];
  if (!Array.isArray(list))
    throw new CapsuleError('CONFIG_INVALID', 'hooks.PreToolUse is not a list.', {
      field: 'hooks.PreToolUse',
      hint: 'Fix the file by hand first; nothing was written.',
    });
  return list;
}

async function confirm(io: CliIO, question: string, yes: boolean): Promise<boolean> {
  if (yes) return true;
  if (!io.interactive) return false;
  const rl = createInterface({ input: io.stdin(), output: io.stderr });
  try {
    const answer = await new Promise<string>((resolve) => rl.question(question, resolve));
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}

function recordFile(stateDir: string, file: string): string {
  return path.join(stateDir, INSTALLS_DIR, `${sha256(file).slice(0, 32)}.json`);
}

async function readRecord(key: StateKey, stateDir: string, file: string): Promise<InstallRecord | undefined> {
  const where = recordFile(stateDir, file);
  const text = await readText(where).catch(() => undefined);
  if (text === undefined) return undefined;
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = installRecordSchema.safeParse(doc);
  if (!parsed.success || parsed.data.file !== file) return undefined;
  const { mac, ...body } = parsed.data;
  // Only what capsule itself recorded is restored: anything else falls back to removing the entry.
  return (await key.verify('hook-install', file, body, mac)) ? parsed.data : undefined;
}

/**
 * `--install` adds one PreToolUse entry running this capsule; `--uninstall` takes exactly it out. The
 * text before is kept (MAC'd, in the per-user state), so an uninstall of a file nobody touched since
 * gives back the very bytes that were there; a file changed meanwhile loses only capsule's entry.
 * The change is shown first and written only after a person's yes (`--yes`; no terminal and no --yes:
 * nothing is written), atomically.
 */
export async function hookInstall(io: CliIO, opts: HookCommandOptions): Promise<number> {
  if (opts.install === true && opts.uninstall === true)
    throw new CapsuleError('USAGE', '--install and --uninstall exclude each other.', { field: '--install' });
  if (opts.user === true && opts.project === true)
    throw new CapsuleError('USAGE', '--user and --project exclude each other.', { field: '--user' });
  const home = homedir();
  const file =
    opts.user === true
      ? path.join(home, '.claude', 'settings.json')
      : path.join((await openProjectAt(io.cwd)).root, '.claude', 'settings.json');
  const stateDir = userStateDir(io.env, home);
  const key = openStateKey(stateDir);
  let diff = '';
  const finish = async (code: number, written: boolean): Promise<number> => {
    const action = opts.install === true ? 'install' : 'uninstall';
    if (opts.json === true) await write(io.stdout, json({ file, action, written, diff }));
    return code;
  };
  const before = await readText(file);
  const settings = await parseSettings(file, before);
  const entries = preToolUse(settings);
  let after: string | undefined;
  if (opts.install === true) {
    if (entries.some(isOurs)) {
      await write(io.stderr, `capsule: ${file} already runs capsule's hook; nothing to do.\n`);
      return finish(EXIT.OK, false);
    }
    const entry = {
      matcher: HOOK_MATCHER,
      hooks: [{ type: 'command', command: hookCommand(opts.confine === true), timeout: HOOK_TIMEOUT_S }],
    };
    const next = { ...settings, hooks: { ...(settings.hooks ?? {}), PreToolUse: [...entries, entry] } };
    after = `${JSON.stringify(next, null, 2)}\n`;
  } else {
    if (before === undefined || !entries.some(isOurs)) {
      await write(io.stderr, `capsule: ${file} holds no hook of capsule's; nothing was written.\n`);
      return finish(EXIT.NOT_FOUND, false);
    }
    const record = await readRecord(key, stateDir, file);
    if (record !== undefined && record.after === sha256(before)) after = record.before ?? undefined;
    else {
      const rest = entries.filter((e) => !isOurs(e));
      const hooks: Record<string, unknown> = { ...(settings.hooks ?? {}), PreToolUse: rest };
      if (rest.length === 0) delete hooks.PreToolUse;
      const next: Record<string, unknown> = { ...settings, hooks };
      if (Object.keys(hooks).length === 0) delete next.hooks;
      after = `${JSON.stringify(next, null, 2)}\n`;
    }
  }
  const shown = unifiedDiff(before ?? '', after ?? '', {
    old: before === undefined ? '/dev/null' : file,
    new: after === undefined ? '/dev/null' : file,
  });
  diff = shown.diff;
  await write(io.stderr, `${shown.diff}${shown.diff.endsWith('\n') ? '' : '\n'}`);
  const verb = opts.install === true ? 'Write' : after === undefined ? 'Remove' : 'Write';
  if (!(await confirm(io, `${verb} ${file}? [y/N] `, opts.yes === true))) {
    await write(
      io.stderr,
      `capsule: nothing was written${io.interactive || opts.yes === true ? '' : ' (no terminal to ask, and no --yes)'}.\n`,
    );
    // No person's yes: the same code as every other change a person did not confirm.
    return finish(EXIT.DENIED, false);
  }
  const where = recordFile(stateDir, file);
  if (opts.install === true) {
    const dir = path.dirname(file);
    const createdDir = !(await stat(dir)
      .then(() => true)
      .catch(() => false));
    const body = {
      schemaVersion: 1 as const,
      file,
      before: before ?? null,
      createdDir,
      after: sha256(after as string),
    };
    await mkdir(path.dirname(where), { recursive: true, mode: 0o700 });
    await writeFileAtomic(
      where,
      `${JSON.stringify({ ...body, mac: await key.sign('hook-install', file, body) })}\n`,
      0o600,
    );
    await mkdir(dir, { recursive: true });
    await writeFileAtomic(file, after as string, await modeOf(file));
    await write(
      io.stderr,
      `capsule: the hook is in ${file}; capsule hook claude --uninstall${opts.user === true ? ' --user' : ''} takes it out.\n`,
    );
    return finish(EXIT.OK, true);
  }
  const record = await readRecord(key, stateDir, file);
  if (after === undefined) {
    await unlink(file);
    if (record?.createdDir === true) await rmdir(path.dirname(file)).catch(() => undefined);
  } else await writeFileAtomic(file, after, await modeOf(file));
  await unlink(where).catch(() => undefined);
  await write(io.stderr, `capsule: capsule's hook is out of ${file}.\n`);
  return finish(EXIT.OK, true);
}

async function modeOf(file: string): Promise<number> {
  return stat(file)
    .then((st) => st.mode & 0o777)
    .catch(() => 0o644);
}
