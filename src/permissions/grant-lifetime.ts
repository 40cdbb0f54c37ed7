import { CapsuleError } from '../base/errors.js';

/** How long a session grant lives: a number of uses, a time, or both (whichever ends first). */
export interface GrantLifetime {
  uses?: number | undefined;
  ttlMs?: number | undefined;
}

/** A session grant with a lifetime (`--grant-for LIFETIME=KEY`). */
export interface LimitedGrant extends GrantLifetime {
  key: string;
}

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
/** A grant longer than this is a project decision, not a session's: refused rather than kept for weeks. */
const MAX_TTL_MS = 30 * UNIT_MS.d!;
const MAX_USES = 1_000_000;

const HINT =
  'LIFETIME is once, a number of uses (3x), a time (90s, 10m, 2h, 1d) or both (3x,10m: whichever ends first); ' +
  'e.g. --grant-for once=run_command:make or --grant-for 10m=run_capability:hello.';

function usage(flag: string, value: string, why: string): CapsuleError {
  return new CapsuleError('USAGE', `${flag} ${value}: ${why}.`, { field: flag, hint: HINT });
}

/**
 * Pure: a lifetime as written: `once`, `<n>x` (uses), `<n>s|m|h|d` (a time), or a use count and a
 * time joined by a comma. Throws USAGE naming `flag`.
 */
export function parseLifetime(text: string, flag = '--grant-for'): GrantLifetime {
  const out: GrantLifetime = {};
  const parts = text.split(',').map((p) => p.trim());
  for (const part of parts) {
    const uses = part === 'once' ? 1 : /^(\d+)x$/.exec(part)?.[1];
    const time = /^(\d+)([smhd])$/.exec(part);
    if (uses !== undefined) {
      const n = Number(uses);
      if (out.uses !== undefined) throw usage(flag, text, 'it gives the number of uses twice');
      if (!Number.isSafeInteger(n) || n < 1 || n > MAX_USES)
        throw usage(flag, text, `the number of uses must be 1 to ${MAX_USES}`);
      out.uses = n;
    } else if (time !== null) {
      const ms = Number(time[1]) * (UNIT_MS[time[2] as string] as number);
      if (out.ttlMs !== undefined) throw usage(flag, text, 'it gives the time twice');
      if (!(ms > 0) || ms > MAX_TTL_MS)
        throw usage(flag, text, 'the time must be more than 0 and at most 30 days');
      out.ttlMs = ms;
    } else {
      throw usage(flag, text, `"${part}" is not a lifetime`);
    }
  }
  return out;
}

/**
 * Pure: `LIFETIME=KEY`. The lifetime's grammar has no `=`, so the first one ends it and the key
 * keeps any of its own (`run_command:env A=1 make`).
 */
export function parseLimitedGrant(value: string, flag = '--grant-for'): LimitedGrant {
  const i = value.indexOf('=');
  if (i <= 0 || i === value.length - 1)
    throw usage(flag, value, 'expected LIFETIME=KEY, e.g. once=run_command:make');
  return { key: value.slice(i + 1), ...parseLifetime(value.slice(0, i), flag) };
}

/** Pure: a lifetime in words, for prompts, audit records and `capsule grants`. */
export function lifetimeText(lifetime: GrantLifetime): string {
  const parts: string[] = [];
  if (lifetime.uses !== undefined) parts.push(lifetime.uses === 1 ? 'once' : `${lifetime.uses} uses`);
  if (lifetime.ttlMs !== undefined) parts.push(`for ${durationText(lifetime.ttlMs)}`);
  return parts.length === 0 ? 'this session' : parts.join(', ');
}

function durationText(ms: number): string {
  for (const [unit, name] of [
    ['d', 'day'],
    ['h', 'hour'],
    ['m', 'minute'],
  ] as const) {
    const size = UNIT_MS[unit] as number;
    if (ms % size === 0) {
      const n = ms / size;
      return `${n} ${name}${n === 1 ? '' : 's'}`;
    }
  }
  const s = Math.round(ms / 1000);
  return `${s} second${s === 1 ? '' : 's'}`;
}
