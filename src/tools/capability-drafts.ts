import { writeFile } from 'node:fs/promises';
import { fieldPath } from '../base/zod-issues.js';
import path from 'node:path';
import { CapsuleError } from '../base/errors.js';
import {
  INTERPRETERS,
  grantsSchema,
  limitsSchema,
  relativePath,
  type ManifestInput,
} from '../manifest/schema.js';
import { MANIFEST_FILE } from '../project/environments.js';
import { CAPABILITY_NAME } from '../project/key-syntax.js';
import type { Environment } from '../manifest/types.js';
import { isReservedName } from '../project/protected-state.js';
import { SANDBOX_IMAGES } from '../runners/docker/image-recipes.js';
import { z } from 'zod';
import type { AgentToolContext } from './ports.js';

// Drafts: a capability described by arguments (the generate_* tools' and `capsule new`'s), checked
// and turned into a manifest and files before anything touches the disk. capability-install.ts
// writes a draft as one folder.

/** Images capsule builds offline from runtimes/docker (see src/runners/docker/images.ts). */
const RUNTIME_IMAGES: Readonly<Record<string, string>> = SANDBOX_IMAGES;

const MAX_FILE_BYTES = 4 * 1024 * 1024;
const MAX_WASM_BYTES = 32 * 1024 * 1024;

const extraFiles = z
  .record(relativePath, z.string().max(MAX_FILE_BYTES))
  .default({})
  .describe(
    'Extra files to store in the capability folder: relative path → UTF-8 content (no "..", no capability.json).',
  );

const common = {
  name: z
    .string()
    .regex(CAPABILITY_NAME, 'must be 1-64 chars of a-z, 0-9, "-" or "_", starting with a letter or digit')
    .describe('Capability name; becomes the folder name under the capability root.'),
  description: z.string().min(1).max(2000).describe('What the capability does, for people and agents.'),
  inputSchema: z
    .record(z.string(), z.unknown())
    .optional()
    .describe('JSON Schema the input document must satisfy (default {"type":"object"}).'),
  outputSchema: z
    .record(z.string(), z.unknown())
    .optional()
    .describe(
      'JSON Schema (an object schema) the output must satisfy: stdout is parsed as JSON and checked after every run; MCP clients get it as structured output.',
    ),
  limits: limitsSchema
    .partial()
    .optional()
    .describe('Resource limits (timeoutMs, memoryMb, outputBytes, pids).'),
  grants: grantsSchema
    .partial()
    .optional()
    .describe('What it may touch: fs paths, network hosts, env vars. Default: nothing.'),
  root: z.string().optional().describe('Capability root to write into (default: the first configured root).'),
  overwrite: z
    .boolean()
    .default(false)
    .describe('Replace an existing capability of the same name. Default false: refuse.'),
};

export const shellParameters = z.strictObject({
  ...common,
  script: z
    .string()
    .min(1)
    .max(MAX_FILE_BYTES)
    .describe('The program: reads the input JSON on stdin, writes output on stdout.'),
  interpreter: z
    .enum(INTERPRETERS)
    .default('sh')
    .describe('Program that runs the script: sh, bash, node or python3.'),
  files: extraFiles,
});

export const wasmParameters = z
  .strictObject({
    ...common,
    source: z
      .string()
      .min(1)
      .max(MAX_FILE_BYTES)
      .optional()
      .describe(
        'JavaScript module exporting `run(input: string): string`; componentized into a Wasm component. It may import only wasi:filesystem/preopens@0.2.12 and wasi:filesystem/types@0.2.12 (the grants.fs folders), wasi:cli/environment@0.2.12 (grants.env), wasi:clocks/* and wasi:random/random, and capsule:capability/http@0.1.0 (`fetch({method, url, headers, body})`, only for grants.network hosts); no sockets, no Node APIs.',
      ),
    wasmBase64: z
      .string()
      .max(Math.ceil((MAX_WASM_BYTES * 4) / 3))
      .optional()
      .describe('A prebuilt .wasm (WASI preview1 module or component), base64; instead of source.'),
  })
  .refine((a) => (a.source === undefined) !== (a.wasmBase64 === undefined), {
    message: 'give exactly one of source (JavaScript) or wasmBase64 (a prebuilt .wasm)',
    path: ['source'],
  });

export const dockerParameters = z.strictObject({
  ...common,
  script: z
    .string()
    .min(1)
    .max(MAX_FILE_BYTES)
    .describe('The program run inside the container (input JSON on stdin).'),
  interpreter: z.enum(INTERPRETERS).default('sh').describe('Program that runs the script inside the image.'),
  image: z
    .string()
    .min(1)
    .max(255)
    .optional()
    .describe(
      'A runtime from runtimes/docker (busybox, node) or an image reference present on the engine. Default: busybox for sh, node for node.',
    ),
  files: extraFiles,
});

const ENTRY_FOR: Record<(typeof INTERPRETERS)[number], string> = {
  sh: 'run.sh',
  bash: 'run.sh',
  node: 'run.mjs',
  python3: 'run.py',
};

/** What a draft's build step may use: the component builder and the call's progress and signal. */
export type BuildContext = Pick<AgentToolContext, 'componentize' | 'progress' | 'signal'>;

/** What a generator produces before anything touches the disk (pure, checked up front). */
export interface Draft {
  name: string;
  environment: Environment;
  manifest: ManifestInput;
  /** Relative path → content. */
  files: Map<string, string | Uint8Array>;
  /** Work to do inside the staging folder (componentizing) before validation. */
  build?: ((stageDir: string, ctx: BuildContext) => Promise<void>) | undefined;
}

function checkExtraFiles(files: Record<string, string>, reservedEntry: string): void {
  for (const rel of Object.keys(files)) {
    const parts = rel.split('/');
    const base = parts.at(-1) ?? rel;
    // The manifest is generated; capsule's own names (capsule.json, .capsule/) at any depth are not agent land.
    const reserved = parts.find((p) => isReservedName(p)) ?? (base === MANIFEST_FILE ? base : undefined);
    if (reserved !== undefined) {
      throw new CapsuleError(
        'PATH_ESCAPE',
        `${fieldPath(['files', rel])}: ${reserved} cannot be written by a generator.`,
        {
          field: `${fieldPath(['files', rel])}`,
          hint: 'The manifest is generated from the arguments; capsule.json and .capsule/ belong to the human.',
        },
      );
    }
    if (rel === reservedEntry) {
      throw new CapsuleError(
        'USAGE',
        `${fieldPath(['files', rel])}: collides with the entry file; put the program in "script".`,
        {
          field: `${fieldPath(['files', rel])}`,
        },
      );
    }
  }
}

function baseManifest(
  args: {
    name: string;
    description: string;
    inputSchema?: Record<string, unknown> | undefined;
    outputSchema?: Record<string, unknown> | undefined;
    limits?: object | undefined;
    grants?: object | undefined;
  },
  environment: Environment,
  entry: string,
): ManifestInput {
  return {
    schemaVersion: 1,
    name: args.name,
    description: args.description,
    environment,
    entry,
    inputSchema: args.inputSchema ?? { type: 'object' },
    ...(args.outputSchema !== undefined ? { outputSchema: args.outputSchema } : {}),
    ...(args.limits !== undefined ? { limits: args.limits as ManifestInput['limits'] } : {}),
    ...(args.grants !== undefined ? { grants: args.grants as ManifestInput['grants'] } : {}),
  };
}

export function shellDraft(args: z.infer<typeof shellParameters>): Draft {
  const entry = ENTRY_FOR[args.interpreter];
  checkExtraFiles(args.files, entry);
  return {
    name: args.name,
    environment: 'shell',
    manifest: { ...baseManifest(args, 'shell', entry), interpreter: args.interpreter },
    files: new Map<string, string | Uint8Array>([[entry, args.script], ...Object.entries(args.files)]),
  };
}

export function dockerDraft(args: z.infer<typeof dockerParameters>): Draft {
  const entry = ENTRY_FOR[args.interpreter];
  checkExtraFiles(args.files, entry);
  const named = args.image ?? (args.interpreter === 'node' ? 'node' : 'busybox');
  const image = RUNTIME_IMAGES[named] ?? named;
  return {
    name: args.name,
    environment: 'docker',
    manifest: { ...baseManifest(args, 'docker', entry), interpreter: args.interpreter, docker: { image } },
    files: new Map<string, string | Uint8Array>([[entry, args.script], ...Object.entries(args.files)]),
  };
}

export function wasmDraft(args: z.infer<typeof wasmParameters>): Draft {
  const entry = 'capability.wasm';
  if (args.wasmBase64 !== undefined) {
    const bytes = Buffer.from(args.wasmBase64, 'base64');
    if (bytes.length < 8 || bytes.readUInt32BE(0) !== 0x0061736d) {
      throw new CapsuleError(
        'USAGE',
        'wasmBase64: does not decode to a WebAssembly binary (no \\0asm header).',
        {
          field: 'wasmBase64',
        },
      );
    }
    return {
      name: args.name,
      environment: 'wasm',
      manifest: baseManifest(args, 'wasm', entry),
      files: new Map<string, string | Uint8Array>([[entry, new Uint8Array(bytes)]]),
    };
  }
  const source = args.source as string;
  return {
    name: args.name,
    environment: 'wasm',
    manifest: { ...baseManifest(args, 'wasm', entry), source: 'source.js' },
    files: new Map<string, string | Uint8Array>([['source.js', source]]),
    async build(stageDir, ctx) {
      if (ctx.componentize === undefined) {
        throw new CapsuleError(
          'RUNNER_UNAVAILABLE',
          'This capsule cannot componentize JavaScript (no Wasm component builder).',
          {
            field: 'source',
            hint: 'Pass a prebuilt module in wasmBase64, or use generate_shell_capability.',
          },
        );
      }
      ctx.progress?.({
        message: `componentizing ${args.name} (JavaScript → Wasm component)`,
        progress: 1,
        total: 3,
      });
      let bytes: Uint8Array;
      try {
        bytes = await ctx.componentize(source, {
          signal: ctx.signal,
          onProgress: (message) => ctx.progress?.({ message, progress: 1, total: 3 }),
        });
      } catch (err) {
        if (err instanceof CapsuleError) throw err;
        throw new CapsuleError(
          'INPUT_INVALID',
          `source: could not be turned into a Wasm component: ${(err as Error).message}`,
          {
            field: 'source',
            hint: 'The module must export a function run(input) that takes and returns a string.',
          },
          { cause: err },
        );
      }
      ctx.progress?.({ message: `componentized: ${bytes.length} bytes`, progress: 2, total: 3 });
      await writeFile(path.join(stageDir, entry), bytes);
    },
  };
}
