/**
 * How much work checking a document against a schema can take, bounded ahead where a bound can be proved.
 *
 * A schema without references (`$ref` and its kin) is a tree: each of its nodes is applied to a document
 * node at most once along each path that reaches it, and each application costs at most the size of that
 * node's own keywords (an enum's values, the names in `required`) — except a pattern, whose match steps
 * through its compiled RE2 program once per character: that program, not the pattern's text, is its size
 * (counted repetition makes 12 bytes a thousand instructions). So the whole check is at most ((schema
 * bytes + pattern instructions) × document bytes) steps, plus, where `uniqueItems` appears, comparing the
 * items of an array with each other: at most (document bytes)² steps. A reference breaks the tree (one
 * node reached from many places, or from itself), and then nothing is bounded here.
 *
 * Where the bound is small, a check runs without the deadline that stops one that runs away
 * (manifest/input.ts): the deadline's watchdog costs far more than such a check does.
 */

/**
 * Steps (of the bound above) under which a check is known to finish in a few milliseconds. A step is no
 * single instruction: an error object under allErrors (a failed `required` name on each of many empty
 * objects) or an RE2 thread stepped costs 60–120 ns, so 2^20 of them were 60–130 ms on this machine;
 * 2^16 are at most a few ms, still far under the deadline, and a typical call (docs/benchmarks.md,
 * schema) stays under it.
 */
export const BOUNDED_CHECK_STEPS = 1 << 16;

/** What a compiled schema's checks can cost: undefined where nothing is bounded (it holds a reference). */
export interface SchemaWork {
  /** The schema's size as JSON text, plus the instructions of its patterns' compiled programs. */
  readonly bytes: number;
  /** Whether any node holds `uniqueItems` (items compared with each other). */
  readonly comparesItems: boolean;
}

const REFERENCES = new Set(['$ref', '$dynamicRef', '$recursiveRef']);

/**
 * The work bound of `schema` (`text` is its JSON; `patternSteps` the instructions of all its patterns'
 * compiled programs, one count per place a pattern is written), or undefined when it holds a reference
 * anywhere — as a key at any depth, even where it would be a property's name: over-counting only costs
 * a deadline.
 */
export function schemaWork(schema: unknown, text: string, patternSteps: number): SchemaWork | undefined {
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
  return { bytes: text.length + patternSteps, comparesItems };
}

/** Whether checking a document of `documentBytes` against a schema of `work` is bounded small. */
export function boundedCheck(work: SchemaWork | undefined, documentBytes: number): boolean {
  if (work === undefined) return false;
  const bytes = Math.max(documentBytes, 1);
  if (work.bytes * bytes > BOUNDED_CHECK_STEPS) return false;
  return !work.comparesItems || bytes * bytes <= BOUNDED_CHECK_STEPS;
}
