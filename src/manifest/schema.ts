import { z } from 'zod';
import { ENVIRONMENTS } from '../project/environments.js';
import { CAPABILITY_NAME } from '../project/key-syntax.js';

export const CURRENT_SCHEMA_VERSION = 1;
export const INTERPRETERS = ['sh', 'bash', 'node', 'python3'] as const;

const ENV_VAR_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

/**
 * A path written in a manifest: relative, forward slashes, no `..` segment, no NUL.
 * This is the syntactic check; the loader also resolves symlinks and checks the real path.
 */
export const relativePath = z
  .string()
  .min(1)
  .max(1024)
  .refine((p) => !p.includes('\0'), 'must not contain a NUL byte')
  .refine((p) => !p.startsWith('/') && !/^[A-Za-z]:/.test(p), 'must be a relative path, not an absolute one')
  .refine((p) => !p.includes('\\'), 'must use forward slashes')
  .refine((p) => !p.split('/').includes('..'), 'must not contain a ".." segment');

/** limits.writeBytes when a manifest leaves it out (see docs/manifest.md). */
export const DEFAULT_WRITE_BYTES = 64 * 1024 * 1024;

export const limitsSchema = z
  .strictObject({
    timeoutMs: z
      .int()
      .min(1)
      .max(3_600_000)
      .default(10_000)
      .describe(
        'Wall-clock limit for one run in milliseconds; the whole process tree / worker / container is killed when it passes.',
      ),
    memoryMb: z
      .int()
      .min(1)
      .max(16_384)
      .default(256)
      .describe(
        'Memory cap in MiB (container memory = memory+swap; Wasm linear memory maximum; a cgroup for shell where the machine allows it — `capsule show` says whether).',
      ),
    outputBytes: z
      .int()
      .min(1)
      .max(256 * 1024 * 1024)
      .default(1024 * 1024)
      .describe(
        'Cap for stdout and for stderr, each, in bytes. Past it the run is killed and `truncated` is reported.',
      ),
    pids: z
      .int()
      .min(1)
      .max(4096)
      .default(64)
      .describe(
        'Maximum number of processes/threads (container pids limit; a cgroup for shell where the machine allows it).',
      ),
    writeBytes: z
      .int()
      .min(1)
      .max(16 * 1024 * 1024 * 1024)
      .default(DEFAULT_WRITE_BYTES)
      .describe(
        'Bytes one Wasm run may write to its rw grants, in total: every byte written, plus what set-size, allocate or a write past the end grows a file by, plus 4096 bytes per new file, folder or link. Past it the write fails with "no space" (ENOSPC / insufficient-space) and `writeLimited` is reported.',
      ),
    networkRequests: z
      .int()
      .min(1)
      .max(100_000)
      .default(100)
      .describe(
        'Network requests (HTTP requests and CONNECT tunnels) one run may make through capsule; past it each is refused. Only used with grants.network.',
      ),
    networkBytes: z
      .int()
      .min(1)
      .max(1024 * 1024 * 1024)
      .default(16 * 1024 * 1024)
      .describe(
        'Bytes one run may send plus receive over the network, in total; past it the connection is cut. Only used with grants.network.',
      ),
  })
  .describe('Resource limits enforced by every runner; a limit hit is reported in the result.');

export const fsGrantSchema = z.strictObject({
  path: relativePath.describe(
    'Path relative to the project root (the folder holding capsule.json). Must resolve inside it.',
  ),
  mode: z.enum(['ro', 'rw']).default('ro').describe('`ro` read-only (default) or `rw` read-write.'),
});

/** HTTP methods a network grant may name. */
const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

const DNS_LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
/** IPv6 syntax is checked by the network layer (node:net); here only the character set. */
const IPV6ISH = /^[0-9a-f:.]+$/;

/**
 * Why a granted host is not acceptable, or undefined when it is: a DNS name (lower case), `*.` + a name of
 * at least two labels, an IPv4 literal, or an IPv6 literal in brackets. Pure, so the parser stays pure.
 */
function hostGrantProblem(host: string): string | undefined {
  if (host === '*' || host === '*.')
    return 'must name hosts: a bare "*" would grant every host (use "*.example.com" for the subdomains of one)';
  if (host !== host.toLowerCase()) return 'must be lower case';
  if (host.includes(':') && !host.startsWith('['))
    return /^[^:]+:\d+$/.test(host)
      ? 'must be a host name only; put the port in "ports" (e.g. { "host": "example.com", "ports": [443] })'
      : 'an IPv6 address must be written in brackets, e.g. "[::1]"';
  if (host.startsWith('[')) {
    return host.endsWith(']') && IPV6ISH.test(host.slice(1, -1)) && host.includes(':')
      ? undefined
      : 'must be an IPv6 address in brackets, e.g. "[2001:db8::1]"';
  }
  if (IPV4.test(host)) return undefined;
  const wildcard = host.startsWith('*.');
  const name = wildcard ? host.slice(2) : host.replace(/\.$/, '');
  if (name.includes('*')) return 'may use "*" only as the whole first label, as in "*.example.com"';
  const labels = name.split('.');
  if (!labels.every((l) => DNS_LABEL.test(l)))
    return 'must be a DNS name (letters, digits and "-" in dot-separated labels), "*.name" or an IP address';
  if (/^\d+$/.test(labels[labels.length - 1] ?? ''))
    return 'is neither a DNS name nor a complete IPv4 address';
  if (wildcard && labels.length < 2)
    return 'a wildcard must cover the subdomains of a registered name ("*.example.com"), not a whole top-level domain';
  return undefined;
}

const CIDR = /^([0-9.]+|[0-9a-f:.]+)(\/\d{1,3})?$/;

export const networkGrantSchema = z
  .strictObject(
    {
      host: z
        .string()
        .min(1)
        .max(253)
        .superRefine((h, ctx) => {
          const problem = hostGrantProblem(h);
          if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
        })
        .describe(
          'Exact host name ("api.example.com"), subdomains of one ("*.example.com", not the name itself), or an IP literal ("192.0.2.7", "[2001:db8::7]"). No bare "*".',
        ),
      ports: z
        .array(z.int().min(1).max(65535))
        .min(1)
        .max(32)
        .optional()
        .describe('TCP ports it may reach on that host. Omitted: 443 and 80.'),
      methods: z
        .array(z.enum(HTTP_METHODS))
        .min(1)
        .optional()
        .describe(
          'HTTP methods allowed. Omitted: any, and HTTPS tunnels (CONNECT). With a list, only plain-HTTP requests whose method capsule can see are allowed.',
        ),
      internal: z
        .array(
          z
            .string()
            .max(64)
            .regex(CIDR, 'must be an IP address or CIDR range, e.g. "10.1.2.3" or "10.0.0.0/8"'),
        )
        .max(16)
        .optional()
        .describe(
          'Private, loopback or link-local addresses (IP or CIDR) this host may resolve to. Omitted: such addresses are refused (an IP-literal host counts as naming itself).',
        ),
    },
    {
      error: (iss) =>
        iss.code !== 'invalid_type'
          ? undefined
          : iss.input === '*'
            ? 'must name hosts: a bare "*" would grant every host (use { "host": "*.example.com" } for the subdomains of one)'
            : 'must be an object { "host": …, "ports"?: […], "methods"?: […] }, e.g. { "host": "api.example.com", "ports": [443] }',
    },
  )
  .describe('One host a capability may reach, and how.');

export type NetworkGrant = z.infer<typeof networkGrantSchema>;

export const grantsSchema = z
  .strictObject({
    fs: z
      .array(fsGrantSchema)
      .max(64)
      .default([])
      .describe('Filesystem paths the capability may see. Empty: none.'),
    network: z
      .array(networkGrantSchema)
      .max(64)
      .default([])
      .describe(
        'Hosts the capability may reach over HTTP(S), through capsule (see docs/network.md). Empty: no network at all.',
      ),
    env: z
      .array(z.string().regex(ENV_VAR_NAME, 'must be an environment variable name'))
      .max(128)
      .default([])
      .describe('Host environment variables passed through by name. Empty: an empty environment.'),
  })
  .describe('What the capability may touch. Everything not granted is denied.');

export const dockerSchema = z
  .strictObject({
    image: z
      .string()
      .min(1)
      .max(255)
      .regex(/^[a-z0-9][a-z0-9._\-/:@]*$/, 'must be an image reference like capsule/busybox:1')
      .describe('Image to run; the images in runtimes/docker are built locally on demand.'),
    runtime: z
      .enum(['runc', 'runsc'])
      .default('runc')
      .describe('OCI runtime; `runsc` is gVisor when installed.'),
    reusable: z
      .boolean()
      .default(false)
      .describe(
        'Opt in to a warm container reused between calls: faster; reset (processes killed, /tmp, /dev/shm and IPC cleared) and verified between calls, discarded when a reset cannot be verified.',
      ),
    privileged: z
      .boolean()
      .default(false)
      .describe('Privileged container. Makes the capability NOT sandboxed.'),
    network: z.enum(['none', 'host']).default('none').describe('`host` makes the capability NOT sandboxed.'),
    pidMode: z
      .enum(['private', 'host'])
      .default('private')
      .describe('`host` makes the capability NOT sandboxed.'),
    ipcMode: z
      .enum(['private', 'host'])
      .default('private')
      .describe('`host` makes the capability NOT sandboxed.'),
    capAdd: z
      .array(z.string().regex(/^[A-Z_]+$/))
      .default([])
      .describe('Linux capabilities to add back. Any makes the capability NOT sandboxed.'),
  })
  .describe('Docker-only settings.');

export const manifestSchema = z
  .strictObject({
    schemaVersion: z
      .literal(CURRENT_SCHEMA_VERSION, {
        error: `must be ${CURRENT_SCHEMA_VERSION} (the only manifest version this capsule reads)`,
      })
      .describe('Manifest format version. Currently 1.'),
    name: z
      .string()
      .regex(CAPABILITY_NAME, 'must be 1-64 chars of a-z, 0-9, "-" or "_", starting with a letter or digit')
      .describe('Safe identifier; must equal the folder name.'),
    description: z.string().min(1).max(2000).describe('What the capability does, for people and agents.'),
    environment: z
      .enum(ENVIRONMENTS)
      .describe('Where it runs: `shell` (host process, not a sandbox), `wasm` or `docker`.'),
    entry: relativePath.describe(
      'File to run, relative to the capability folder: a script (shell/docker) or a .wasm module/component (wasm).',
    ),
    interpreter: z
      .enum(INTERPRETERS)
      .optional()
      .describe('shell/docker: program that runs `entry` (e.g. `sh`). Omitted: `entry` itself is executed.'),
    args: z.array(z.string().max(4096)).max(64).default([]).describe('Extra arguments after the entry.'),
    source: relativePath
      .optional()
      .describe(
        'wasm: the JavaScript source a component was built from (kept beside it, part of the content hash).',
      ),
    docker: dockerSchema.optional(),
    inputSchema: z
      .record(z.string(), z.unknown())
      .default({ type: 'object' })
      .describe('JSON Schema the input document must satisfy before anything runs.'),
    outputSchema: z
      .record(z.string(), z.unknown())
      .refine((schema) => schema.type === 'object', {
        message: 'must describe a JSON object ("type": "object"): MCP structured output is an object',
      })
      .optional()
      .describe(
        "JSON Schema the output (stdout, parsed as JSON) must satisfy; checked after every run, and a run whose output does not match fails. Served to MCP clients as the tool's outputSchema.",
      ),
    limits: limitsSchema.default({
      timeoutMs: 10_000,
      memoryMb: 256,
      outputBytes: 1024 * 1024,
      pids: 64,
      writeBytes: DEFAULT_WRITE_BYTES,
      networkRequests: 100,
      networkBytes: 16 * 1024 * 1024,
    }),
    grants: grantsSchema.default({ fs: [], network: [], env: [] }),
  })
  .superRefine((m, ctx) => {
    if (m.environment === 'docker' && m.docker === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['docker'],
        message: 'is required when environment is "docker" (at least docker.image)',
      });
    }
    if (m.environment !== 'docker' && m.docker !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['docker'],
        message: 'is only allowed when environment is "docker"',
      });
    }
    if (m.environment === 'wasm' && !m.entry.endsWith('.wasm')) {
      ctx.addIssue({
        code: 'custom',
        path: ['entry'],
        message: 'must be a .wasm file when environment is "wasm"',
      });
    }
    if (m.environment === 'wasm' && m.interpreter !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['interpreter'],
        message: 'is not used by wasm capabilities; remove it',
      });
    }
    if (m.environment !== 'wasm' && m.source !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['source'], message: 'is only used by wasm capabilities' });
    }
  })
  .describe('capability.json: one capability folder under a capability root.');

export type Manifest = z.infer<typeof manifestSchema>;
export type ManifestInput = z.input<typeof manifestSchema>;
