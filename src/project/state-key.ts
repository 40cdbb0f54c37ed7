import { constants, type Stats } from 'node:fs';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { link, lstat, mkdir, open, unlink } from 'node:fs/promises';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';
import { secretDir } from '../base/user-state.js';

/** The key file inside secretDir(stateDir). */
export const STATE_KEY_FILE = 'state.key';
const KEY_BYTES = 32;
/** How a MAC is written in a document: the algorithm, then the hex digest. */
const MAC_PREFIX = 'hmac-sha256:';
const MAC_PATTERN = /^hmac-sha256:[0-9a-f]{64}$/;

/** What a MAC vouches for; part of the MAC input, so one kind of record never passes for another. */
export type MacPurpose =
  | 'policy-snapshot'
  | 'audit-head'
  | 'audit-writer'
  | 'scan-index'
  | 'one-use-grant'
  | 'hook-install'
  | 'engine-posture';

/** A MAC as documents hold it (`hmac-sha256:<64 hex>`). */
export function isMacText(text: unknown): text is string {
  return typeof text === 'string' && MAC_PATTERN.test(text);
}

/**
 * JSON with every object's keys sorted and no whitespace: the bytes a MAC is computed over, so a
 * document re-serialized with another key order or spacing still verifies, and nothing else does.
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v ?? null)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

const errCode = (err: unknown): string => (err as NodeJS.ErrnoException).code ?? 'error';

/**
 * The per-user key that authenticates what capsule trusts on disk (confirmed-policy snapshots, audit
 * heads, the scan index): HMAC-SHA256 over canonicalJson of {purpose, subject, body}. Bytes written by
 * anything that cannot read this key are therefore not capsule's. The key is 32 random bytes in
 * `<stateDir>/secret/state.key` (file 0600, folder 0700, owned by the user), made on first use;
 * confined host processes see an empty folder in its place, and no grant reaches the state folder.
 *
 * One instance per state folder, built by the composition root and handed to the stores; the file is
 * read once per instance.
 */
export class StateKey {
  readonly file: string;
  #key: Promise<Buffer> | undefined;

  constructor(options: { stateDir: string }) {
    this.file = path.join(secretDir(options.stateDir), STATE_KEY_FILE);
  }

  /** The key bytes, reading (or, the first time on this machine, creating) the key file. */
  load(): Promise<Buffer> {
    this.#key ??= this.#loadOrCreate().catch((err: unknown) => {
      // A person can fix the file while a server runs: the next use tries again.
      this.#key = undefined;
      throw err;
    });
    return this.#key;
  }

  /** The MAC of `body` as `purpose` for `subject` (the file or key it is stored under). */
  async sign(purpose: MacPurpose, subject: string, body: unknown): Promise<string> {
    return macWith(await this.load(), purpose, subject, body);
  }

  /** Whether `mac` is this key's MAC of `body` as `purpose` for `subject` (constant-time compare). */
  async verify(purpose: MacPurpose, subject: string, body: unknown, mac: unknown): Promise<boolean> {
    if (!isMacText(mac)) return false;
    const expected = Buffer.from(macWith(await this.load(), purpose, subject, body), 'utf8');
    const given = Buffer.from(mac, 'utf8');
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  async #loadOrCreate(): Promise<Buffer> {
    const dir = path.dirname(this.file);
    try {
      await mkdir(dir, { recursive: true, mode: 0o700 });
    } catch (err) {
      throw new CapsuleError(
        'CONFIG_INVALID',
        `The folder of capsule's key ${dir} cannot be created (${errCode(err)}).`,
        {
          file: dir,
          hint: "Make capsule's state folder writable ($CAPSULE_STATE_DIR, $XDG_STATE_HOME/capsule or ~/.local/state/capsule).",
        },
        { cause: err },
      );
    }
    checkOwned(dir, await lstat(dir), 'folder');
    const found = await this.#read();
    if (found !== undefined) return found;
    await this.#create(dir);
    const made = await this.#read();
    if (made === undefined)
      throw new CapsuleError('CONFIG_INVALID', `capsule's key ${this.file} vanished as it was made.`, {
        file: this.file,
        hint: 'Something else is deleting files in that folder; run the command again.',
      });
    return made;
  }

  /**
   * Written whole to a name of its own, then linked to the key's name: link() fails when the name
   * exists, so of processes creating the key at once exactly one wins and every one reads the winner.
   * A reader never sees a partial key.
   */
  async #create(dir: string): Promise<void> {
    const temp = path.join(dir, `.${STATE_KEY_FILE}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
    const handle = await open(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
    try {
      await handle.chmod(0o600); // whatever the umask
      await handle.writeFile(randomBytes(KEY_BYTES));
      await handle.sync();
    } finally {
      await handle.close();
    }
    try {
      await link(temp, this.file);
    } catch (err) {
      if (errCode(err) !== 'EEXIST') {
        throw new CapsuleError(
          'CONFIG_INVALID',
          `capsule's key ${this.file} cannot be created (${errCode(err)}).`,
          { file: this.file, hint: `Make ${dir} writable by this user.` },
          { cause: err },
        );
      }
    } finally {
      await unlink(temp).catch(() => undefined);
    }
    // The new name survives a crash once the folder is synced too.
    const folder = await open(dir, constants.O_RDONLY).catch(() => undefined);
    await folder?.sync().catch(() => undefined);
    await folder?.close();
  }

  async #read(): Promise<Buffer | undefined> {
    let handle;
    try {
      handle = await open(this.file, constants.O_RDONLY | constants.O_NOFOLLOW);
    } catch (err) {
      if (errCode(err) === 'ENOENT') return undefined;
      throw new CapsuleError(
        'CONFIG_INVALID',
        `capsule's key ${this.file} cannot be read (${errCode(err) === 'ELOOP' ? 'it is a symlink' : errCode(err)}).`,
        { file: this.file, hint: keyHint(this.file) },
        { cause: err },
      );
    }
    try {
      const st = await handle.stat();
      checkOwned(this.file, st, 'file');
      if (st.size !== KEY_BYTES)
        throw new CapsuleError(
          'CONFIG_INVALID',
          `capsule's key ${this.file} holds ${st.size} byte(s), not ${KEY_BYTES}: it is not a key capsule made.`,
          { file: this.file, hint: keyHint(this.file) },
        );
      const key = Buffer.alloc(KEY_BYTES);
      const { bytesRead } = await handle.read(key, 0, KEY_BYTES, 0);
      if (bytesRead !== KEY_BYTES)
        throw new CapsuleError('CONFIG_INVALID', `capsule's key ${this.file} could not be read whole.`, {
          file: this.file,
          hint: keyHint(this.file),
        });
      return key;
    } finally {
      await handle.close();
    }
  }
}

function macWith(key: Buffer, purpose: MacPurpose, subject: string, body: unknown): string {
  const text = canonicalJson({ purpose, subject, body });
  return MAC_PREFIX + createHmac('sha256', key).update(text, 'utf8').digest('hex');
}

function keyHint(file: string): string {
  return (
    `Delete ${file} to have capsule make a new key; what the old one authenticated is then no longer ` +
    'a confirmation: confirm the policy again with capsule reload, and start new audit chains with capsule audit reset.'
  );
}

/**
 * The key and its folder belong to this user and nobody else may read them: another owner, or a
 * group or other permission bit, and the key is no longer known to be secret.
 */
function checkOwned(file: string, st: Stats, kind: 'file' | 'folder'): void {
  const uid = process.getuid?.();
  const isKind = kind === 'file' ? st.isFile() : st.isDirectory();
  if (!isKind) {
    throw new CapsuleError(
      'CONFIG_INVALID',
      `capsule's key ${kind} ${file} is not a ${kind}${st.isSymbolicLink() ? ' (a symlink)' : ''}.`,
      { file, hint: kind === 'file' ? keyHint(file) : `Remove ${file}; capsule makes it anew.` },
    );
  }
  // No owners or permission bits to check here (Windows).
  if (uid === undefined) return;
  if (st.uid !== uid) {
    throw new CapsuleError(
      'CONFIG_INVALID',
      `capsule's key ${kind} ${file} belongs to uid ${st.uid}, not to this user (uid ${uid}).`,
      {
        file,
        hint: `Run capsule as the user who owns it, or point CAPSULE_STATE_DIR at a state folder of this user's own.`,
      },
    );
  }
  if ((st.mode & 0o077) !== 0) {
    const wanted = kind === 'file' ? '600' : '700';
    throw new CapsuleError(
      'CONFIG_INVALID',
      `capsule's key ${kind} ${file} has mode ${(st.mode & 0o777).toString(8)}: others may read it, so it cannot vouch for anything.`,
      {
        file,
        hint:
          kind === 'file'
            ? keyHint(file)
            : `chmod ${wanted} ${file} (and delete the key in it if anyone else may have read it).`,
      },
    );
  }
}
