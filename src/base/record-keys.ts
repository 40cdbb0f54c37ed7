import type { z } from 'zod';

/**
 * A record schema's refinement: every key must match `syntax`. Checked here rather than as a key schema so
 * that the issue names the offending key as its field. `valid` goes on with each key that does match.
 */
export function keysOfSyntax(
  syntax: RegExp,
  message: string,
  valid?: (key: string, ctx: z.RefinementCtx) => void,
): (record: Record<string, unknown>, ctx: z.RefinementCtx) => void {
  return (record, ctx) => {
    for (const key of Object.keys(record)) {
      if (!syntax.test(key)) ctx.addIssue({ code: 'custom', path: [key], message });
      else valid?.(key, ctx);
    }
  };
}
