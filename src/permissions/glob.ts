/**
 * Two small glob dialects, compiled to anchored regular expressions (pure, no I/O):
 * - rule globs (`Tool(glob)`, fnmatch without FNM_PATHNAME, docs/permissions.md): `*` any run of
 *   characters (spaces and `/` too), `?` one character, `[abc]` / `[!abc]` a class, `\x` a literal x;
 * - path globs (`write_file:` keys): `*` and `?` stay inside one path segment, `**` spans segments.
 * Kept here rather than a glob library: the rule dialect matches a whole command line, where `*`
 * must cross `/` and spaces, which path-glob libraries (picomatch, minimatch) do not offer.
 */

function escapeRegex(ch: string): string {
  // Only syntax characters and '/' may be escaped under the 'u' flag.
  return /[\\^$.*+?()[\]{}|/]/.test(ch) ? `\\${ch}` : ch;
}

/** Reads a `[...]` class starting at `i` (the '['); returns its regex and the index after it, or null. */
function readClass(glob: string, i: number): { re: string; next: number } | null {
  let j = i + 1;
  let negate = false;
  if (glob[j] === '!' || glob[j] === '^') {
    negate = true;
    j++;
  }
  let body = '';
  let first = true;
  for (; j < glob.length; j++) {
    const ch = glob[j] as string;
    if (ch === ']' && !first) return { re: `[${negate ? '^' : ''}${body}]`, next: j + 1 };
    body += ch === '\\' || ch === ']' || ch === '[' || ch === '^' ? `\\${ch}` : ch;
    first = false;
  }
  return null;
}

function compile(glob: string, pathMode: boolean): RegExp {
  let re = '';
  for (let i = 0; i < glob.length;) {
    const ch = glob[i] as string;
    if (ch === '\\' && i + 1 < glob.length) {
      re += escapeRegex(glob[i + 1] as string);
      i += 2;
    } else if (ch === '*') {
      if (pathMode && glob[i + 1] === '*') {
        // `**/` matches zero or more whole segments; a trailing `**` matches everything below.
        if (glob[i + 2] === '/') {
          re += '(?:.*/)?';
          i += 3;
        } else {
          re += '.*';
          i += 2;
        }
      } else {
        re += pathMode ? '[^/]*' : '[\\s\\S]*';
        i += 1;
      }
    } else if (ch === '?') {
      re += pathMode ? '[^/]' : '[\\s\\S]';
      i += 1;
    } else if (ch === '[') {
      const cls = readClass(glob, i);
      if (cls === null) {
        re += '\\[';
        i += 1;
      } else {
        re += cls.re;
        i = cls.next;
      }
    } else {
      re += escapeRegex(ch);
      i += 1;
    }
  }
  return new RegExp(`^${re}$`, 'u');
}

/** Compiled-regex cache owned by the caller (no module-level state). */
export class GlobCache {
  private readonly rules = new Map<string, RegExp>();
  private readonly paths = new Map<string, RegExp>();

  rule(glob: string): RegExp {
    let re = this.rules.get(glob);
    if (re === undefined) {
      re = compile(glob, false);
      this.rules.set(glob, re);
    }
    return re;
  }

  path(glob: string): RegExp {
    let re = this.paths.get(glob);
    if (re === undefined) {
      re = compile(glob, true);
      this.paths.set(glob, re);
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
