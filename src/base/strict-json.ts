/**
 * JSON.parse for documents capsule treats as policy (capsule.json, manifests, cases, audit lines).
 * Plain JSON.parse keeps the last of two equal keys, so `"deny": [...], "deny": []` silently drops
 * the first list while a person reading the file sees it. Here a repeated key at any depth (compared
 * after unescaping, so `"deny"` and `"\u0064eny"` are the same key) is an error naming its path.
 */

export type StrictJsonResult =
  | { ok: true; value: unknown }
  | {
      ok: false;
      /** `syntax`: not JSON at all; `duplicate-key`: valid JSON with a key given twice in one object. */
      kind: 'syntax' | 'duplicate-key';
      message: string;
      /** Dotted path of the repeated key (`permissions.deny`, `cases[2].input.a`), for duplicate-key. */
      field?: string | undefined;
    };

type Frame =
  | { type: 'object'; path: string; keys: Set<string>; expectKey: boolean; current: string }
  | { type: 'array'; path: string; index: number };

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$-]*$/;

function childPath(parent: string, key: string | number): string {
  if (typeof key === 'number') return `${parent}[${key}]`;
  if (IDENTIFIER.test(key)) return parent === '' ? key : `${parent}.${key}`;
  return `${parent}[${JSON.stringify(key)}]`;
}

/** Parse `text`; never throws. */
export function parseStrictJson(text: string): StrictJsonResult {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { ok: false, kind: 'syntax', message: (err as Error).message };
  }
  const dup = findDuplicateKey(text);
  if (dup !== undefined) {
    return {
      ok: false,
      kind: 'duplicate-key',
      field: dup,
      message: `the key ${dup} appears twice (JSON keeps only the last one; remove the duplicate)`,
    };
  }
  return { ok: true, value };
}

/**
 * Scan text that JSON.parse already accepted: only strings and the structural characters matter,
 * so a small tokenizer is exact here. Returns the path of the first repeated key.
 */
function findDuplicateKey(text: string): string | undefined {
  const stack: Frame[] = [];
  const here = (): string => {
    const top = stack[stack.length - 1];
    if (top === undefined) return '';
    return top.type === 'object' ? childPath(top.path, top.current) : childPath(top.path, top.index);
  };
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      let j = i + 1;
      let escaped = false;
      for (; j < n; j++) {
        const d = text.charCodeAt(j);
        if (d === 0x5c /* \ */) {
          escaped = true;
          j++;
        } else if (d === 0x22) break;
      }
      const top = stack[stack.length - 1];
      if (top?.type === 'object' && top.expectKey) {
        const raw = text.slice(i + 1, j);
        const key = escaped ? (JSON.parse(text.slice(i, j + 1)) as string) : raw;
        if (top.keys.has(key)) return childPath(top.path, key);
        top.keys.add(key);
        top.current = key;
        top.expectKey = false;
      }
      i = j;
    } else if (c === 0x7b /* { */) {
      stack.push({ type: 'object', path: here(), keys: new Set(), expectKey: true, current: '' });
    } else if (c === 0x5b /* [ */) {
      stack.push({ type: 'array', path: here(), index: 0 });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top?.type === 'object') top.expectKey = true;
      else if (top !== undefined) top.index++;
    }
  }
  return undefined;
}
