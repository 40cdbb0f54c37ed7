/**
 * Whether a JSON Schema can accept any document at all: a schema no input satisfies makes a capability
 * that can never run, refused when it is loaded instead of at every call.
 *
 * Sound, not complete: it answers "unsatisfiable" only with a proof. Every keyword narrows what a
 * schema accepts, so a keyword this module does not understand is simply left out, which can only make
 * the answer "satisfiable". What it proves: `false`, `not` of a schema that accepts everything, an empty
 * `enum`, `const`/`enum` values none of which passes the schema's other checks, bounds that leave no
 * number, string length, array length or property count, types that `allOf`, `anyOf` or `not` rule out,
 * and required properties whose own schema is unsatisfiable or that `additionalProperties: false`
 * forbids.
 */

type JsonType = 'null' | 'boolean' | 'integer' | 'number' | 'string' | 'array' | 'object';

/** `number` includes the integers; `integer` alone stands for a schema whose numbers must be whole. */
const ALL_TYPES: readonly JsonType[] = ['null', 'boolean', 'number', 'string', 'array', 'object'];

/** Keywords that describe and never constrain: a schema made only of these accepts everything. */
const ANNOTATIONS = new Set([
  '$schema',
  '$id',
  '$comment',
  'title',
  'description',
  'default',
  'examples',
  'readOnly',
  'writeOnly',
  'deprecated',
  'definitions',
  '$defs',
]);

/** Where in the schema the proof was found (`properties.n`, `allOf[1]`) and what it is. */
export interface Unsatisfiable {
  at: string;
  reason: string;
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

const count = (v: unknown): number | undefined =>
  typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined;

const join = (at: string, key: string): string => (at === '' ? key : `${at}.${key}`);

function jsonTypeOf(value: unknown): JsonType {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value as JsonType;
}

/** Length as JSON Schema counts it: in code points, not UTF-16 units. */
const codePoints = (s: string): number => [...s].length;

/** The types `type` allows, as a set over ALL_TYPES plus 'integer' (whole numbers only). */
function declaredTypes(schema: Record<string, unknown>): Set<JsonType> | undefined {
  const t = schema.type;
  const list = typeof t === 'string' ? [t] : Array.isArray(t) ? t : undefined;
  // Ajv reads an empty list as no constraint at all.
  if (list === undefined || list.length === 0) return undefined;
  const out = new Set<JsonType>();
  for (const name of list) {
    if (name === 'number') out.add('number');
    else if (name === 'integer') out.add('integer');
    else if (typeof name === 'string' && (ALL_TYPES as readonly string[]).includes(name))
      out.add(name as JsonType);
    else return undefined; // not a type this module knows: claim nothing
  }
  if (out.has('number')) out.delete('integer');
  return out;
}

/** Whether a schema accepts every document: `true`, `{}`, or only annotations. */
function acceptsEverything(schema: unknown): boolean {
  if (schema === true) return true;
  return isRecord(schema) && Object.keys(schema).every((k) => ANNOTATIONS.has(k));
}

/** Numeric bounds: the lowest and highest number allowed, each inclusive or not. */
interface Range {
  lo: number;
  loOpen: boolean;
  hi: number;
  hiOpen: boolean;
}

function numericRange(schema: Record<string, unknown>): Range {
  const r: Range = { lo: -Infinity, loOpen: false, hi: Infinity, hiOpen: false };
  const min = num(schema.minimum);
  const xmin = num(schema.exclusiveMinimum); // draft-04's boolean form is left out (claims nothing)
  const max = num(schema.maximum);
  const xmax = num(schema.exclusiveMaximum);
  if (min !== undefined) r.lo = min;
  if (xmin !== undefined && xmin >= r.lo) Object.assign(r, { lo: xmin, loOpen: true });
  if (max !== undefined) r.hi = max;
  if (xmax !== undefined && xmax <= r.hi) Object.assign(r, { hi: xmax, hiOpen: true });
  return r;
}

function rangeText(r: Range): string {
  const lo = r.lo === -Infinity ? '' : `${r.loOpen ? 'more than' : 'at least'} ${r.lo}`;
  const hi = r.hi === Infinity ? '' : `${r.hiOpen ? 'less than' : 'at most'} ${r.hi}`;
  return [lo, hi].filter((s) => s !== '').join(' and ');
}

const inRange = (n: number, r: Range): boolean =>
  (r.loOpen ? n > r.lo : n >= r.lo) && (r.hiOpen ? n < r.hi : n <= r.hi);

function rangeEmpty(r: Range): boolean {
  if (r.lo > r.hi) return true;
  return r.lo === r.hi && (r.loOpen || r.hiOpen);
}

function integerRangeEmpty(r: Range): boolean {
  if (rangeEmpty(r)) return true;
  if (!Number.isFinite(r.lo) || !Number.isFinite(r.hi)) return false;
  let first = Math.ceil(r.lo);
  if (r.loOpen && first === r.lo) first += 1;
  let last = Math.floor(r.hi);
  if (r.hiOpen && last === r.hi) last -= 1;
  return first > last;
}

/** `[min, max]` of a pair of count keywords (minLength/maxLength …), or undefined when they leave room. */
function countClash(schema: Record<string, unknown>, minKey: string, maxKey: string): string | undefined {
  const min = count(schema[minKey]);
  const max = count(schema[maxKey]);
  return min !== undefined && max !== undefined && min > max
    ? `${minKey} ${min} is greater than ${maxKey} ${max}`
    : undefined;
}

/**
 * The types a schema can still accept after its own type-specific keywords, each with why another
 * type was ruled out. Only keywords of this very schema object; subschemas are handled by the caller.
 */
function localTypes(schema: Record<string, unknown>, at: string): { types: Set<JsonType>; why: string[] } {
  const why: string[] = [];
  const declared = declaredTypes(schema);
  const types = new Set<JsonType>(declared ?? [...ALL_TYPES]);

  const range = numericRange(schema);
  if (types.has('number') && rangeEmpty(range)) {
    types.delete('number');
    why.push(`no number is ${rangeText(range)}`);
  }
  if (types.has('integer') && integerRangeEmpty(range)) {
    types.delete('integer');
    why.push(`no integer is ${rangeText(range)}`);
  }
  const clashes: Array<[JsonType, string, string]> = [
    ['string', 'minLength', 'maxLength'],
    ['array', 'minItems', 'maxItems'],
    ['object', 'minProperties', 'maxProperties'],
  ];
  for (const [type, minKey, maxKey] of clashes) {
    const clash = types.has(type) ? countClash(schema, minKey, maxKey) : undefined;
    if (clash !== undefined) {
      types.delete(type);
      why.push(clash);
    }
  }
  if (types.has('object')) {
    const objectWhy = objectClash(schema, at);
    if (objectWhy !== undefined) {
      types.delete('object');
      why.push(objectWhy);
    }
  }
  return { types, why };
}

/** Why no object can satisfy the object keywords of `schema`, or undefined. */
function objectClash(schema: Record<string, unknown>, at: string): string | undefined {
  const required = Array.isArray(schema.required)
    ? [...new Set(schema.required.filter((r): r is string => typeof r === 'string'))]
    : [];
  const maxProps = count(schema.maxProperties);
  if (maxProps !== undefined && required.length > maxProps)
    return `it requires ${required.length} properties but maxProperties is ${maxProps}`;
  const properties = isRecord(schema.properties) ? schema.properties : {};
  for (const name of required) {
    if (Object.hasOwn(properties, name)) {
      const inner = unsatisfiable(properties[name], join(at, `properties.${name}`));
      if (inner !== undefined)
        return `required property "${name}" can never be valid (${inner.at}: ${inner.reason})`;
    } else if (schema.additionalProperties === false && schema.patternProperties === undefined) {
      return `it requires "${name}", which additionalProperties: false forbids`;
    }
  }
  return undefined;
}

/** Whether `value` passes the checks of `schema` this module understands (a necessary condition only). */
function passesLocal(value: unknown, schema: Record<string, unknown>): boolean {
  const type = jsonTypeOf(value);
  const declared = declaredTypes(schema);
  if (declared !== undefined && !(declared.has(type) || (type === 'integer' && declared.has('number'))))
    return false;
  if (typeof value === 'number' && !inRange(value, numericRange(schema))) return false;
  const within = (n: number, minKey: string, maxKey: string): boolean => {
    const min = count(schema[minKey]);
    const max = count(schema[maxKey]);
    return (min === undefined || n >= min) && (max === undefined || n <= max);
  };
  if (typeof value === 'string' && !within(codePoints(value), 'minLength', 'maxLength')) return false;
  if (Array.isArray(value) && !within(value.length, 'minItems', 'maxItems')) return false;
  if (isRecord(value) && !within(Object.keys(value).length, 'minProperties', 'maxProperties')) return false;
  return true;
}

/** Equal as JSON values (what `const` and `enum` compare). */
function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b))
    return a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  if (isRecord(a) && isRecord(b)) {
    const ka = Object.keys(a);
    return (
      ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]))
    );
  }
  return false;
}

/** The types a schema (with its allOf/anyOf/oneOf/not) can accept: an over-approximation, never less. */
function possibleTypes(schema: unknown, at: string): { types: Set<JsonType>; proof?: Unsatisfiable } {
  if (schema === false) return { types: new Set(), proof: { at, reason: 'the schema is false' } };
  if (!isRecord(schema)) return { types: new Set(ALL_TYPES) };
  // Draft-07 ignores a $ref's siblings, later drafts apply them: either way nothing is claimed.
  if (schema.$ref !== undefined) return { types: new Set(ALL_TYPES) };
  const here = (reason: string, where = at): { types: Set<JsonType>; proof: Unsatisfiable } => ({
    types: new Set(),
    proof: { at: where, reason },
  });

  if (schema.not !== undefined && acceptsEverything(schema.not))
    return here('"not" holds a schema that accepts everything');
  if (Array.isArray(schema.enum) && schema.enum.length === 0) return here('"enum" is empty');

  const { types, why } = localTypes(schema, at);

  // `not: {type: …}` alone rules those types out entirely.
  if (isRecord(schema.not) && Object.keys(schema.not).every((k) => k === 'type' || ANNOTATIONS.has(k))) {
    const denied = declaredTypes(schema.not);
    if (denied !== undefined) {
      for (const t of denied) types.delete(t);
      if (denied.has('number')) types.delete('integer');
    }
  }

  const intersect = (other: Set<JsonType>): void => {
    for (const t of [...types]) {
      if (other.has(t)) continue;
      // A schema that allows every number allows the integers; one that allows only integers narrows.
      if (t === 'number' && other.has('integer')) {
        types.delete('number');
        types.add('integer');
      } else if (!(t === 'integer' && other.has('number'))) types.delete(t);
    }
  };

  if (Array.isArray(schema.allOf)) {
    for (const [i, member] of schema.allOf.entries()) {
      const inner = possibleTypes(member, join(at, `allOf[${i}]`));
      if (inner.proof !== undefined && inner.types.size === 0)
        return { types: new Set(), proof: inner.proof };
      intersect(inner.types);
    }
  }
  for (const key of ['anyOf', 'oneOf'] as const) {
    const members = schema[key];
    if (!Array.isArray(members) || members.length === 0) continue;
    const union = new Set<JsonType>();
    const proofs: string[] = [];
    for (const [i, member] of members.entries()) {
      const inner = possibleTypes(member, join(at, `${key}[${i}]`));
      for (const t of inner.types) union.add(t);
      if (inner.proof !== undefined) proofs.push(`${inner.proof.at}: ${inner.proof.reason}`);
    }
    if (union.size === 0) return here(`no member of "${key}" can be valid (${proofs.join('; ')})`);
    intersect(union);
  }

  const candidates =
    schema.const !== undefined ? [schema.const] : Array.isArray(schema.enum) ? schema.enum : undefined;
  if (candidates !== undefined) {
    const fits = candidates.filter((v) => {
      if (!passesLocal(v, schema)) return false;
      const t = jsonTypeOf(v);
      if (!(types.has(t) || (t === 'integer' && types.has('number')))) return false;
      // Both present: a value must be the const and in the enum.
      return (
        !(schema.const !== undefined && Array.isArray(schema.enum)) ||
        schema.enum.some((e) => jsonEqual(e, v))
      );
    });
    if (fits.length === 0)
      return here(
        schema.const !== undefined
          ? `its "const" ${JSON.stringify(schema.const).slice(0, 40)} fails its other checks`
          : `no value of its "enum" passes its other checks`,
      );
  }

  if (types.size === 0)
    return here(why.length > 0 ? why.join('; ') : 'no JSON type is left by "type", "allOf" and "not"');
  return { types };
}

/**
 * A proof that no document satisfies `schema` (where in it, and why), or undefined when it may be
 * satisfiable. `at` is the path of `schema` inside the document it came from, for the message.
 */
export function unsatisfiable(schema: unknown, at = ''): Unsatisfiable | undefined {
  const { types, proof } = possibleTypes(schema, at);
  return types.size === 0 ? (proof ?? { at, reason: 'no value is left' }) : undefined;
}
