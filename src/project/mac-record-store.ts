import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { writeFileAtomic } from '../base/atomic-write.js';
import { stateRecordFile } from '../base/user-state.js';
import type { MacPurpose, StateKey } from './state-key.js';

/**
 * A folder of records in the per-user state folder, one file per identity (a project's real root, an
 * engine address), each carrying the MAC of the per-user key for one purpose: what makes a record there
 * capsule's own. What a record that does not verify means is the store's to say (a forgery that stops
 * everything, a hint dropped and measured again).
 */
export abstract class MacRecordStore {
  readonly dir: string;
  protected readonly key: StateKey;
  readonly #purpose: MacPurpose;

  protected constructor(options: { stateDir: string; key: StateKey }, folder: string, purpose: MacPurpose) {
    this.dir = path.join(options.stateDir, folder);
    this.key = options.key;
    this.#purpose = purpose;
  }

  protected recordFile(identity: string): string {
    return stateRecordFile(this.dir, identity);
  }

  protected sign(subject: string, body: unknown): Promise<string> {
    return this.key.sign(this.#purpose, subject, body);
  }

  protected verify(subject: string, body: unknown, mac: unknown): Promise<boolean> {
    return this.key.verify(this.#purpose, subject, body, mac);
  }

  /** Replaces a record whole: the folder only this user may enter, the file only this user may read. */
  protected async writeRecord(file: string, text: string): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    await writeFileAtomic(file, text, 0o600);
  }
}
