import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, unlink } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import type { StateKey } from '../project/state-key.js';
import { CapsuleError } from '../base/errors.js';

/** The folder of one-use grants inside capsule's per-user state. */
export const ONE_USE_GRANTS_DIR = 'one-use-grants';
/** An id is 32 lowercase hex digits: nothing else is ever looked up (no path can be smuggled in). */
const ID_PATTERN = /^[0-9a-f]{32}$/;

const grantSchema = z.strictObject({
  schemaVersion: z.literal(1).describe('Version of this document.'),
  id: z.string().regex(ID_PATTERN).describe('The id the grant is passed by (also its file name).'),
  key: z.string().min(1).describe('The one permission key it covers, exactly.'),
  projectRoot: z.string().min(1).describe('The real path of the project it was minted for.'),
  expiresAt: z.int().min(0).describe('Milliseconds since the epoch after which it is void.'),
  origin: z.string().describe('What minted it (for the audit log), e.g. "capsule hook claude --confine".'),
  mac: z.string().describe("HMAC of the other fields with capsule's per-user key."),
});

type GrantBody = Omit<z.infer<typeof grantSchema>, 'mac'>;

/** A grant that was redeemed: the key it covers, for one use in this process. */
export interface RedeemedGrant {
  key: string;
  origin: string;
}

/**
 * One-use grants that only capsule can mint: a document in capsule's per-user state (hidden from every
 * confined process), MAC'd with the per-user key, named by a random id. Redeeming renames it away first,
 * so of several processes presenting one id exactly one gets it; a forged, expired, foreign or reused
 * id is refused. A grant written on a command line is that command line's word; an id is only worth what
 * capsule minted under it.
 */
export class OneUseGrantStore {
  readonly dir: string;
  private readonly key: StateKey;
  private readonly now: () => number;

  constructor(options: { stateDir: string; key: StateKey; now?: () => number }) {
    this.dir = path.join(options.stateDir, ONE_USE_GRANTS_DIR);
    this.key = options.key;
    this.now = options.now ?? Date.now;
  }

  /** Mint a grant for exactly `key` in `projectRoot`, void after `ttlMs`; returns its id. */
  async mint(grant: { key: string; projectRoot: string; ttlMs: number; origin: string }): Promise<string> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    await this.sweep();
    const id = randomBytes(16).toString('hex');
    const body: GrantBody = {
      schemaVersion: 1,
      id,
      key: grant.key,
      projectRoot: grant.projectRoot,
      expiresAt: this.now() + grant.ttlMs,
      origin: grant.origin,
    };
    const mac = await this.key.sign('one-use-grant', id, body);
    const file = path.join(this.dir, `${id}.json`);
    const temp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
    const handle = await open(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
    try {
      await handle.writeFile(`${JSON.stringify({ ...body, mac })}\n`);
      await handle.sync();
    } finally {
      await handle.close();
    }
    // Whole or not at all: a redeemer never sees half a grant.
    await rename(temp, file);
    return id;
  }

  /**
   * Take the grant `id` for `projectRoot`: it is gone after this call whatever the outcome. Throws
   * PERMISSION_DENIED for an id capsule did not mint, one already used, expired, or minted for another
   * project.
   */
  async redeem(id: string, projectRoot: string): Promise<RedeemedGrant> {
    const refuse = (why: string): CapsuleError =>
      new CapsuleError('PERMISSION_DENIED', `--grant-id ${id.slice(0, 40)}: ${why}; nothing was granted.`, {
        field: '--grant-id',
        hint: 'A one-use grant is minted by capsule hook claude --confine for one command; it cannot be written by hand.',
      });
    if (!ID_PATTERN.test(id)) throw refuse('not an id capsule mints (32 hex digits)');
    const file = path.join(this.dir, `${id}.json`);
    const taken = `${file}.${randomBytes(6).toString('hex')}.taken`;
    try {
      // The one atomic step: whoever renames it has it, everyone after finds nothing.
      await rename(file, taken);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT')
        throw refuse('no such grant (never minted, or already used)');
      throw refuse(`it cannot be taken (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    let text: string;
    try {
      text = await readFile(taken, 'utf8');
    } finally {
      await unlink(taken).catch(() => undefined);
    }
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch {
      throw refuse('the grant is not a document capsule wrote');
    }
    const parsed = grantSchema.safeParse(doc);
    if (!parsed.success || parsed.data.id !== id) throw refuse('the grant is not a document capsule wrote');
    const { mac, ...body } = parsed.data;
    if (!(await this.key.verify('one-use-grant', id, body, mac)))
      throw refuse("the grant's MAC does not verify: capsule did not mint it");
    if (body.expiresAt < this.now()) throw refuse('the grant has expired');
    if (body.projectRoot !== projectRoot)
      throw refuse(`the grant was minted for the project ${body.projectRoot}, not ${projectRoot}`);
    return { key: body.key, origin: body.origin };
  }

  /** Remove grants that expired unused (a person said no at Claude Code's prompt, or nothing ran). */
  private async sweep(): Promise<void> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const now = this.now();
    await Promise.all(
      names
        .filter((n) => n.endsWith('.json'))
        .map(async (n) => {
          const file = path.join(this.dir, n);
          try {
            const doc = JSON.parse(await readFile(file, 'utf8')) as { expiresAt?: unknown };
            if (typeof doc.expiresAt === 'number' && doc.expiresAt < now) await unlink(file);
          } catch {
            // unreadable or gone meanwhile: left alone (redeem refuses it anyway)
          }
        }),
    );
  }
}
