// Checking an input against a typical schema with patterns: capsule's check (patterns on RE2, the check
// under its deadline) against the floor, plain Ajv with V8's own RegExp, in the same run. Per call, warm
// (the schema compiled once), and the first call (compile included) in a fresh validator.
import { createRequire } from 'node:module';
import { stats } from './stats.mjs';

const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 200, pattern: '^[A-Za-z][A-Za-z0-9 _-]*$' },
    email: { type: 'string', pattern: '^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$' },
    tags: { type: 'array', items: { type: 'string', pattern: '^[a-z0-9-]{1,32}$' }, maxItems: 20 },
    count: { type: 'integer', minimum: 0 },
  },
  patternProperties: { '^x-[a-z]+$': { type: 'string' } },
  required: ['name'],
  additionalProperties: false,
};
const INPUT = JSON.stringify({
  name: 'Ada Lovelace',
  email: 'ada@example.org',
  tags: ['math', 'engine-1', 'notes'],
  count: 3,
  'x-note': 'hi',
});

/** Median ms per call of `fn` over `rounds` rounds of `perRound` calls. */
function perCall(fn, { rounds = 15, perRound = 2000 } = {}) {
  for (let i = 0; i < perRound; i++) fn(); // warm up
  const samples = [];
  for (let r = 0; r < rounds; r++) {
    const t = performance.now();
    for (let i = 0; i < perRound; i++) fn();
    samples.push((performance.now() - t) / perRound);
  }
  return stats(samples);
}

function firstCall(make, rounds = 15) {
  const samples = [];
  for (let r = 0; r < rounds; r++) {
    const t = performance.now();
    make();
    samples.push(performance.now() - t);
  }
  return stats(samples);
}

export async function benchSchema() {
  const { InputValidator } = await import('../dist/manifest/input.js');
  const { Ajv } = createRequire(import.meta.url)('ajv');
  const capability = {
    name: 'bench',
    manifestPath: '/bench/capability.json',
    manifest: { inputSchema: SCHEMA },
  };
  const plain = new Ajv({ allErrors: true, strict: false }).compile(SCHEMA);
  const floor = () => {
    if (plain(JSON.parse(INPUT)) !== true) throw new Error('the bench input must match');
  };
  const ours = new InputValidator();
  await ours.preload([SCHEMA]);
  const check = () => ours.validate(capability, INPUT);
  const floorName = 'schema: check a typical input, plain Ajv (V8 RegExp)';
  const firstFloor = 'schema: first check (compile), plain Ajv (V8 RegExp)';
  return [
    { name: floorName, ...perCall(floor), isFloor: true },
    { name: 'schema: check a typical input, capsule (RE2, deadline)', ...perCall(check), floor: floorName },
    {
      name: firstFloor,
      ...firstCall(() => new Ajv({ allErrors: true, strict: false }).compile(SCHEMA)(JSON.parse(INPUT))),
      isFloor: true,
    },
    {
      name: 'schema: first check (compile), capsule',
      ...firstCall(() => new InputValidator().validate(capability, INPUT)),
      floor: firstFloor,
    },
  ];
}
