import { shellWord } from '../base/shell-quote.js';
import type { CeilingVerdict } from './ceiling.js';
import { deniedByOf, type Denial } from './denial.js';
import type { PermissionRequest } from './types.js';

// The words of a denial: what the engine says when a call is refused, and how to allow it. The data form
// (Denial) is built here too, so the message and the data say the same thing.

/** A denial as data (see denial.ts): the one place the engine builds it. */
export function denialOf(
  request: PermissionRequest,
  source: string,
  what: string,
  extra: { matched?: string | undefined; ceiling?: Denial['ceiling']; ceilingSkipped?: boolean } = {},
): Denial {
  return {
    by: deniedByOf(source, extra.ceilingSkipped === true),
    source,
    key: request.key.raw,
    matched: extra.matched,
    ceiling: extra.ceiling,
    what,
  };
}

/** What happened at an Ask that ended in a denial, without how to allow it (surfaces add that). */
export function denialHead(request: PermissionRequest, asked: boolean, ignored: readonly string[]): string {
  const key = request.key.raw;
  if (asked) return `${key} was refused at the prompt.`;
  const skipped =
    ignored.length > 0
      ? ` ${ignored.join(' and ')} would allow it, but it is not sandboxed, and a project file cannot allow host code.`
      : '';
  return `${key} needs approval and no one can be asked.${skipped}`;
}

/** The denial text: names the key and says exactly how to allow it (`configFile`: where a project grant goes). */
export function denialMessage(
  request: PermissionRequest,
  ceiling: CeilingVerdict,
  asked: boolean,
  configFile: string,
): string {
  const key = request.key.raw;
  const head = asked
    ? `Permission denied: ${key} was refused at the prompt.`
    : `Permission denied: ${key} needs approval and no one can be asked (--no-prompt, or no terminal).`;
  const grant = `run again with --grant ${shellWord(key)} (this process only)`;
  if (ceiling.ceiling === 'project') {
    const entry = JSON.stringify({
      [key]:
        request.contentHash !== undefined
          ? { level: 'AlwaysThisProject', contentHash: request.contentHash }
          : 'AlwaysThisProject',
    });
    return `${head} To allow it, ${grant}, or add ${entry.slice(1, -1)} to "allowlist" in ${configFile}.`;
  }
  const compound = request.key.compound
    ? ' It is a compound command: only this exact command is covered.'
    : '';
  return `${head} To allow it, ${grant}; it is not sandboxed (${ceiling.reason}), so capsule.json cannot allow it for the project.${compound}`;
}

/** Why a project-file allow did not apply to an unsandboxed call (the engine says it once each). */
export function ignoredAllowText(what: string, request: PermissionRequest, ceiling: CeilingVerdict): string {
  return (
    `${what} does not apply to ${request.key.raw}: it is not sandboxed (${ceiling.reason}). ` +
    'A project file can allow sandboxed calls only; host code needs --grant, --mode or a person.'
  );
}
