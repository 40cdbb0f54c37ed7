import { EXIT } from '../exit-codes.js';
import type { CliIO } from '../output.js';
import type { HookCommandOptions } from './hook.js';

export async function hookInstall(_io: CliIO, _opts: HookCommandOptions): Promise<number> {
  return EXIT.FAILURE;
}
