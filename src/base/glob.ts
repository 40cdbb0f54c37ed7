/**
 * Two small glob dialects, compiled to whole-subject matchers that run in linear time (pure, no I/O):
 * - rule globs (`Tool(glob)`, fnmatch without FNM_PATHNAME, docs/permissions.md): `*` any run of
 *   characters (spaces and `/` too), `?` one character, `[abc]` / `[!abc]` a class, `\x` a literal x;
 * - path globs (`write_file:` keys): `*` and `?` stay inside one path segment, `**` spans segments.
 * Kept here rather than a glob library: the rule dialect matches a whole command line, where `*`
 * must cross `/` and spaces, which path-glob libraries (picomatch, minimatch) do not offer.
 */

/**
 * One step of a compiled glob. Matching simulates all steps at once over the subject (a set of positions,
 * never backtracking), so it takes time linear in the subject for a given glob: a rule with many stars and
 * an agent's long command cannot stall the gate.
 */
type Step =
  | { kind: 'char'; test: (c: string) => boolean }
  /** Any run (`*`, `**`), of characters that pass `test`. */
  | { kind: 'star'; test: (c: string) => boolean }
  /** `**\/`: may skip the next `skip` steps (zero segments), or run them. */
  | { kind: 'optional'; skip: number };

/** A compiled glob: whole-subject matching, in linear time. */
export interface GlobMatcher {
  test(subject: string): boolean;
}

const anyChar = (): boolean => true;
const notSlash = (c: string): boolean => c !== '/';

/** Reads a `[...]` class starting at `i` (the '['); returns its test and the index after it, or null. */
function readClass(glob: string, i: number): { test: (c: string) => boolean; next: number } | null {
  let j = i + 1;
  let negate = false;
  if (glob[j] === '!' || glob[j] === '^') {
    negate = true;
    j++;
  }
  const items: string[] = [];
  let first = true;
  for (; j < glob.length; j++) {
    const ch = glob[j] as string;
    if (ch === ']' && !first) {
      const ranges: Array<[number, number]> = [];
      for (let k = 0; k < items.length; k++) {
        const lo = items[k] as string;
        if (items[k + 1] === '-' && k + 2 < items.length) {
          ranges.push([lo.codePointAt(0) as number, (items[k + 2] as string).codePointAt(0) as number]);
          k += 2;
        } else ranges.push([lo.codePointAt(0) as number, lo.codePointAt(0) as number]);
      }
      const inClass = (c: string): boolean => {
        const n = c.codePointAt(0) as number;
        return ranges.some(([a, b]) => n >= a && n <= b);
      };
      return { test: (c) => inClass(c) !== negate, next: j + 1 };
    }
    items.push(ch);
    first = false;
  }
  return null;
}

function compileSteps(glob: string, pathMode: boolean): Step[] {
  const steps: Step[] = [];
  const lit = (ch: string): Step => ({ kind: 'char', test: (c) => c === ch });
  for (let i = 0; i < glob.length;) {
    const ch = glob[i] as string;
    if (ch === '\\' && i + 1 < glob.length) {
      steps.push(lit(glob[i + 1] as string));
      i += 2;
    } else if (ch === '*') {
      if (pathMode && glob[i + 1] === '*') {
        // `**/` matches zero or more whole segments; a trailing `**` matches everything below.
        if (glob[i + 2] === '/') {
          steps.push({ kind: 'optional', skip: 2 }, { kind: 'star', test: anyChar }, lit('/'));
          i += 3;
        } else {
          steps.push({ kind: 'star', test: anyChar });
          i += 2;
        }
      } else {
        steps.push({ kind: 'star', test: pathMode ? notSlash : anyChar });
        i += 1;
      }
    } else if (ch === '?') {
      steps.push({ kind: 'char', test: pathMode ? notSlash : anyChar });
      i += 1;
    } else if (ch === '[') {
      const cls = readClass(glob, i);
      if (cls === null) {
        steps.push(lit('['));
        i += 1;
      } else {
        steps.push({ kind: 'char', test: cls.test });
        i = cls.next;
      }
    } else {
      steps.push(lit(ch));
      i += 1;
    }
  }
  return steps;
}

function compile(glob: string, pathMode: boolean): GlobMatcher {
  const steps = compileSteps(glob, pathMode);
  const n = steps.length;
  /** Add `i` and everything reachable from it without reading a character. */
  const close = (set: Uint8Array, i: number): void => {
    for (let at = i; at <= n && set[at] === 0;) {
      set[at] = 1;
      const step = steps[at];
      if (step === undefined) return;
      if (step.kind === 'optional') {
        close(set, at + 1 + step.skip);
        at += 1;
      } else if (step.kind === 'star') at += 1;
      else return;
    }
  };
  return {
    test(subject: string): boolean {
      let current = new Uint8Array(n + 1);
      close(current, 0);
      for (const c of subject) {
        const next = new Uint8Array(n + 1);
        let any = false;
        for (let i = 0; i < n; i++) {
          if (current[i] === 0) continue;
          const step = steps[i] as Step;
          if (step.kind === 'star') {
            if (step.test(c)) {
              close(next, i);
              any = true;
            }
          } else if (step.kind === 'char' && step.test(c)) {
            close(next, i + 1);
            any = true;
          }
        }
        if (!any) return false;
        current = next;
      }
      return current[n] === 1;
    },
  };
}

/** Compiled-glob cache owned by the caller (no module-level state). */
export class GlobCache {
  private readonly rules = new Map<string, GlobMatcher>();
  private readonly paths = new Map<string, GlobMatcher>();

  rule(glob: string): GlobMatcher {
    return GlobCache.compiled(this.rules, glob, false);
  }

  path(glob: string): GlobMatcher {
    return GlobCache.compiled(this.paths, glob, true);
  }

  private static compiled(cache: Map<string, GlobMatcher>, glob: string, pathMode: boolean): GlobMatcher {
    let re = cache.get(glob);
    if (re === undefined) {
      re = compile(glob, pathMode);
      cache.set(glob, re);
    }
    return re;
  }
}

export function matchRuleGlob(glob: string, subject: string): boolean {
  return compile(glob, false).test(subject);
}

export function matchPathGlob(glob: string, subject: string): boolean {
  return compile(glob, true).test(subject);
}

export function hasGlobMeta(text: string): boolean {
  return /[*?[\\]/.test(text);
}
