/**
 * Where a schema holds regular expressions. Ajv matches `pattern` values and `patternProperties` keys
 * against documents (input, a capability's output), so each runs on the linear-time engine
 * (src/linear-regex.ts); a pattern that engine cannot compile is found here when the manifest loads, so
 * the manifest is refused naming the place rather than failing on its first run.
 */
import type { LinearRegexEngine } from '../base/linear-regex.js';

/** One regular expression of a schema: where it is (`inputSchema.properties.s.pattern`) and its text. */
export interface SchemaPattern {
  at: string;
  source: string;
}

/**
 * Keywords whose value maps names to schemas: a name there is the user's (a property may be called
 * `enum`), so every value is a schema, whatever its name.
 */
const SCHEMA_MAPS = new Set([
  'properties',
  'patternProperties',
  '$defs',
  'definitions',
  'dependencies',
  'dependentSchemas',
]);

/**
 * Pure: every regular expression in `schema` (a `pattern` value or a `patternProperties` key, at any
 * depth: properties, items, $defs, propertyNames, …), in document order.
 */
export function schemaPatterns(schema: unknown, field: string): SchemaPattern[] {
  const found: SchemaPattern[] = [];
  const visit = (node: unknown, at: string, isMap: boolean): void => {
    if (Array.isArray(node)) {
      for (const [i, v] of node.entries()) visit(v, `${at}[${i}]`, false);
      return;
    }
    if (node === null || typeof node !== 'object') return;
    const obj = node as Record<string, unknown>;
    if (isMap) {
      for (const [k, v] of Object.entries(obj)) visit(v, `${at}.${k}`, false);
      return;
    }
    if (typeof obj.pattern === 'string') found.push({ at: `${at}.pattern`, source: obj.pattern });
    const pp = obj.patternProperties;
    if (pp !== null && typeof pp === 'object' && !Array.isArray(pp)) {
      for (const key of Object.keys(pp)) found.push({ at: `${at}.patternProperties key`, source: key });
    }
    // Data keywords (enum, const, default, examples) are walked too: a `$ref` such as `#/default`
    // makes Ajv compile what is there as a schema.
    for (const [k, v] of Object.entries(obj)) visit(v, `${at}.${k}`, SCHEMA_MAPS.has(k));
  };
  visit(schema, field, false);
  return found;
}

/** The first pattern in `schema` that `engine` cannot run, naming where it is; undefined when all can. */
export function schemaPatternProblem(
  schema: unknown,
  field: string,
  engine: LinearRegexEngine,
): string | undefined {
  for (const p of schemaPatterns(schema, field)) {
    const reason = engine.problem(p.source);
    if (reason !== undefined) return `${p.at} ${JSON.stringify(p.source)} is refused: ${reason}`;
  }
  return undefined;
}
