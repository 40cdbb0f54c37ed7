/**
 * How much work checking a document against a schema can take, bounded ahead where a bound can be proved.
 *
 * A schema without references (`$ref` and its kin) is a tree: each of its nodes is applied to a document
 * node at most once along each path that reaches it, and each application costs at most the size of that
 * node's own keywords (a pattern on a string, an enum's values, the names in `required`). So the whole
 * check is at most (schema bytes × document bytes) steps, plus, where `uniqueItems` appears, comparing the
 * items of an array with each other: at most (document bytes)² steps. A reference breaks the tree (one
 * node reached from many places, or from itself), and then nothing is bounded here.
 *
 * Where the bound is small, a check runs without the deadline that stops one that runs away
 * (manifest/input.ts): the deadline's watchdog costs far more than such a check does.
 */

/** Steps (of the bound above) under which a check is known to finish in well under a millisecond or so. */
export const BOUNDED_CHECK_STEPS = 1 << 20;

/** What a compiled schema's checks can cost: undefined where nothing is bounded (it holds a reference). */
export interface SchemaWork {
  /** The schema's size as JSON text. */
  readonly bytes: number;
  /** Whether any node holds `uniqueItems` (items compared with each other). */
  readonly comparesItems: boolean;
}

const REFERENCES = new Set(['$ref', '$dynamicRef', '$recursiveRef']);

/**
 * The work bound of `schema` (`text` is its JSON), or undefined when it holds a reference anywhere — as a
 * key at any depth, even where it would be a property's name: over-counting only costs a deadline.
 */
export function schemaWork(schema: unknown, text: string): SchemaWork | undefined {
  let comparesItems = false;
  const stack: unknown[] = [schema];
  while (stack.length > 0) {
    const node = stack.pop();
    if (node === null || typeof node !== 'object') continue;
    if (Array.isArray(node)) {
      stack.push(...node);
      continue;
    }
    for (const [key, value] of Object.entries(node)) {
      if (REFERENCES.has(key)) return undefined;
      if (key === 'uniqueItems') comparesItems = true;
      stack.push(value);
    }
  }
  return { bytes: text.length, comparesItems };
}

/** Whether checking a document of `documentBytes` against a schema of `work` is bounded small. */
export function boundedCheck(work: SchemaWork | undefined, documentBytes: number): boolean {
  if (work === undefined) return false;
  const bytes = Math.max(documentBytes, 1);
  if (work.bytes * bytes > BOUNDED_CHECK_STEPS) return false;
  return !work.comparesItems || bytes * bytes <= BOUNDED_CHECK_STEPS;
}
