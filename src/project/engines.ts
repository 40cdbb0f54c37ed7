import { z } from 'zod';
import { CapsuleError } from '../base/errors.js';
import { parseStrictJson } from '../base/strict-json.js';
import { keysOfSyntax } from '../base/record-keys.js';

/** Engine names: what `--engine NAME` and `capsule engines` show. */
const ENGINE_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/**
 * An engine address: a socket path, or a tcp:// host (a name, IPv4 or bracketed IPv6) and port, nothing
 * else. No userinfo, path, query or fragment: `tcp://127.0.0.1:2376@other:2376` reads as one host and
 * connects to another, and the address is what a person confirms.
 */
const ENGINE_ADDRESS =
  /^(unix:\/\/\/.+|tcp:\/\/(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):\d{1,5})$/;

const tlsSchema = z
  .strictObject({
    ca: z
      .string()
      .min(1)
      .describe('Path of the CA certificate (PEM) the engine’s certificate must chain to.'),
    cert: z.string().min(1).describe('Path of the client certificate (PEM).'),
    key: z.string().min(1).describe('Path of the client key (PEM).'),
  })
  .describe(
    'Mutual TLS for a tcp:// engine (as dockerd --tlsverify expects). Paths relative to the project root.',
  );

/** Where an engine answers: a local socket or a TCP address. */
const engineAddress = (what: string) =>
  z.string().regex(ENGINE_ADDRESS, 'must be unix:///path/to/docker.sock or tcp://host:port').describe(what);

/** Plain TCP gives anyone on the path the engine (root on its host) and the capability's input. */
function requireTlsOverTcp(
  engine: { address: string; tls: unknown },
  noun: 'engine' | 'manager',
  ctx: z.RefinementCtx,
): void {
  if (engine.address.startsWith('tcp://') && engine.tls === undefined) {
    ctx.addIssue({
      code: 'custom',
      path: ['tls'],
      message: `is required for a tcp:// ${noun} (capsule never talks to an engine over plain TCP)`,
    });
  }
}

const dockerEngineSchema = z
  .strictObject({
    type: z.literal('docker').describe('A Docker engine capsule talks to directly (the engine pool).'),
    host: engineAddress('Where the engine answers: unix:///path (a local socket) or tcp://host:port.'),
    tls: tlsSchema.optional(),
  })
  .superRefine((engine, ctx) => requireTlsOverTcp({ address: engine.host, tls: engine.tls }, 'engine', ctx))
  .describe('One Docker engine.');

const swarmEngineSchema = z
  .strictObject({
    type: z.literal('swarm').describe('A Docker Swarm cluster: each call is a one-shot service on it.'),
    manager: engineAddress('Where a manager of the swarm answers: unix:///path or tcp://host:port.'),
    tls: tlsSchema.optional(),
  })
  .superRefine((engine, ctx) =>
    requireTlsOverTcp({ address: engine.manager, tls: engine.tls }, 'manager', ctx),
  )
  .describe('One Docker Swarm cluster, reached through a manager.');

export const enginesSchema = z
  .record(z.string(), z.discriminatedUnion('type', [dockerEngineSchema, swarmEngineSchema]))
  .superRefine(
    keysOfSyntax(ENGINE_NAME, 'is not an engine name (lower-case letters, digits, . _ -; e.g. "build-1")'),
  )
  .describe(
    'Docker engines docker capabilities run on, by name (docs/scale-out.md). Empty: the one engine of DOCKER_HOST or the local socket. Calls are scheduled across the healthy ones; `--engine NAME` picks one.',
  );

export type DockerEngineConfig = z.infer<typeof dockerEngineSchema> | z.infer<typeof swarmEngineSchema>;
export type EnginesConfig = z.infer<typeof enginesSchema>;

/** The variable CI sets to add engines (the same JSON as capsule.json's `engines`). */
const ENGINES_ENV = 'CAPSULE_ENGINES';
/** The variable `--engine` falls back to. */
export const ENGINE_ENV = 'CAPSULE_ENGINE';

/** capsule.json's engines plus those of $CAPSULE_ENGINES (a name in both: the variable's wins). */
export function resolveEngines(configured: EnginesConfig, env: NodeJS.ProcessEnv): EnginesConfig {
  const text = env[ENGINES_ENV];
  if (text === undefined || text.trim() === '') return configured;
  const raw = parseStrictJson(text);
  if (!raw.ok) {
    throw new CapsuleError('USAGE', `${ENGINES_ENV} is not JSON: ${raw.message}`, {
      field: ENGINES_ENV,
      hint: `set it to the same object as capsule.json "engines", e.g. {"a":{"type":"docker","host":"unix:///run/a.sock"}}`,
    });
  }
  const parsed = enginesSchema.safeParse(raw.value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new CapsuleError(
      'USAGE',
      `${ENGINES_ENV}.${issue?.path.join('.') ?? ''} ${issue?.message ?? ''}`.trim(),
      {
        field: ENGINES_ENV,
        hint: 'see docs/scale-out.md for the engine fields',
      },
    );
  }
  return { ...configured, ...parsed.data };
}

/**
 * The engines a session may use: all of them, or those `selection` names (comma-separated, `--engine a,b`).
 * Empty when none is configured (the default engine). An unknown name is a usage error naming it.
 */
export function selectEngines(
  engines: EnginesConfig,
  selection: string | undefined,
): Array<{ name: string; config: DockerEngineConfig }> {
  const all = Object.entries(engines).map(([name, config]) => ({ name, config }));
  if (selection === undefined || selection.trim() === '') return all;
  const names = selection
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  return names.map((name) => {
    const config = engines[name];
    if (config === undefined) {
      throw new CapsuleError('USAGE', `--engine ${name}: no such engine`, {
        field: '--engine',
        hint:
          all.length === 0
            ? 'no engines are configured: add "engines" to capsule.json or set CAPSULE_ENGINES (docs/scale-out.md)'
            : `configured engines: ${all.map((e) => e.name).join(', ')} (capsule engines lists them)`,
      });
    }
    return { name, config };
  });
}
