import { randomBytes } from 'node:crypto';
import { chmod, mkdir, realpath, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { CapsuleError } from '../errors.js';
import { loadCapability } from '../manifest/load.js';
import { isInside } from '../manifest/paths.js';
import {
  CAPABILITY_NAME,
  INTERPRETERS,
  MANIFEST_FILE,
  grantsSchema,
  limitsSchema,
  relativePath,
  type ManifestInput,
} from '../manifest/schema.js';
import type { Environment } from '../manifest/types.js';
import { GENERATE_CAPABILITY, makeKey } from '../permissions/keys.js';
import type { AgentToolContext, Componentize } from './ports.js';

export type { Componentize };
import { capabilitySummary } from './capability-tools.js';
import { askHost, defineTool, type AgentTool } from './define.js';
import { isReservedName } from '../permissions/protected-state.js';
import { SANDBOX_IMAGES } from '../runners/docker/image-recipes.js';

/** Images capsule builds offline from runtimes/docker (see src/runners/docker/images.ts). */
export const RUNTIME_IMAGES: Readonly<Record<string, string>> = SANDBOX_IMAGES;

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

const shellParameters = z.strictObject({
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

const wasmParameters = z
  .strictObject({
    ...common,
    source: z
      .string()
      .min(1)
      .max(MAX_FILE_BYTES)
      .optional()
      .describe(
        'JavaScript module exporting `run(input: string): string`; componentized into a Wasm component.',
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

const dockerParameters = z.strictObject({
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

/** What a generator produces before anything touches the disk (pure, checked up front). */
interface Draft {
  name: string;
  environment: Environment;
  manifest: ManifestInput;
  /** Relative path → content. */
  files: Map<string, string | Uint8Array>;
  /** Work to do inside the staging folder (componentizing) before validation. */
  build?: ((stageDir: string, ctx: AgentToolContext) => Promise<void>) | undefined;
}

function checkExtraFiles(files: Record<string, string>, reservedEntry: string): void {
  for (const rel of Object.keys(files)) {
    const parts = rel.split('/');
    const base = parts.at(-1) ?? rel;
    // The manifest is generated; capsule's own names (capsule.json, .capsule/) at any depth are not agent land.
    const reserved = parts.find((p) => isReservedName(p)) ?? (base === MANIFEST_FILE ? base : undefined);
    if (reserved !== undefined) {
      throw new CapsuleError('PATH_ESCAPE', `files.${rel}: ${reserved} cannot be written by a generator.`, {
        field: `files.${rel}`,
        hint: 'The manifest is generated from the arguments; capsule.json and .capsule/ belong to the human.',
      });
    }
    if (rel === reservedEntry) {
      throw new CapsuleError(
        'USAGE',
        `files.${rel}: collides with the entry file; put the program in "script".`,
        {
          field: `files.${rel}`,
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

function shellDraft(args: z.infer<typeof shellParameters>): Draft {
  const entry = ENTRY_FOR[args.interpreter];
  checkExtraFiles(args.files, entry);
  return {
    name: args.name,
    environment: 'shell',
    manifest: { ...baseManifest(args, 'shell', entry), interpreter: args.interpreter },
    files: new Map<string, string | Uint8Array>([[entry, args.script], ...Object.entries(args.files)]),
  };
}

function dockerDraft(args: z.infer<typeof dockerParameters>): Draft {
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

function wasmDraft(args: z.infer<typeof wasmParameters>): Draft {
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
        );
      }
      ctx.progress?.({ message: `componentized: ${bytes.length} bytes`, progress: 2, total: 3 });
      await writeFile(path.join(stageDir, entry), bytes);
    },
  };
}

/** Real path of `p`, or its lexical absolute form while it does not exist yet. */
async function realOrResolved(p: string): Promise<string> {
  return realpath(p).catch(() => path.resolve(p));
}

/**
 * The capability root to write into: one of the registry's roots, never a protected path. With
 * `create`, the root folder is made (only in execute(): permission() has no side effects).
 */
async function chooseRoot(
  ctx: AgentToolContext,
  requested: string | undefined,
  create: boolean,
): Promise<string> {
  const roots = await Promise.all(ctx.registry.roots.map(realOrResolved));
  let root: string | undefined;
  if (requested === undefined) root = roots[0];
  else {
    const wanted = await realOrResolved(path.resolve(ctx.workspace.root, requested));
    root = roots.find((r) => r === wanted);
    if (root === undefined) {
      throw new CapsuleError(
        'PATH_ESCAPE',
        `root: "${requested}" is not one of the capability roots (${roots.join(', ')}).`,
        {
          field: 'root',
          hint: 'Capabilities are written only into the configured roots (capsule.json "roots").',
        },
      );
    }
  }
  if (root === undefined) throw new CapsuleError('CONFIG_INVALID', 'No capability root is configured.');
  // A root may be the project root itself (holding capsule.json): only the folder written counts.
  await ctx.workspace.assertWritable(root, 'root', root, { containing: false });
  if (!create) return root;
  await mkdir(root, { recursive: true });
  const real = await realpath(root);
  await ctx.workspace.assertWritable(real, 'root', real, { containing: false });
  return real;
}

async function exists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}

export interface GenerateResult {
  name: string;
  environment: Environment;
  dir: string;
  contentHash: string;
  replaced: boolean;
  sandboxed: boolean;
  isolation: string;
}

/**
 * Write a draft as one capability folder: staged in a hidden folder inside the root, validated by the
 * loader there, and only then renamed into place. A failure leaves nothing visible behind.
 */
async function writeDraft(
  draft: Draft,
  args: { root?: string | undefined; overwrite: boolean },
  ctx: AgentToolContext,
): Promise<GenerateResult> {
  const root = await chooseRoot(ctx, args.root, true);
  const target = path.join(root, draft.name);
  if (!isInside(root, target) || target === root)
    throw new CapsuleError('PATH_ESCAPE', `name: "${draft.name}" leaves the root.`, { field: 'name' });
  await ctx.workspace.assertWritable(target, 'name', draft.name);
  if (!args.overwrite && (await exists(target))) {
    throw new CapsuleError(
      'ALREADY_EXISTS',
      `A capability folder "${draft.name}" already exists in ${root}; nothing was written.`,
      {
        field: 'name',
        hint: 'Choose another name, or pass overwrite: true to replace it.',
      },
    );
  }
  // Dot-prefixed: the registry skips it, so a half-built capability is never listed.
  const staging = path.join(root, `.capsule-gen-${randomBytes(6).toString('hex')}`);
  const stageDir = path.join(staging, draft.name);
  let replaced = false;
  try {
    await mkdir(stageDir, { recursive: true });
    for (const [rel, content] of draft.files) {
      const file = path.resolve(stageDir, rel);
      if (!isInside(stageDir, file) || file === stageDir) {
        throw new CapsuleError('PATH_ESCAPE', `files.${rel}: leaves the capability folder.`, {
          field: `files.${rel}`,
        });
      }
      // Where the file will end up, not the staging copy: no capsule.json or .capsule/ at any depth.
      await ctx.workspace.assertWritable(
        path.join(target, path.relative(stageDir, file)),
        `files.${rel}`,
        rel,
      );
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, content, { flag: 'wx' });
      if (/\.(sh|py|mjs)$/.test(rel)) await chmod(file, 0o755);
    }
    await writeFile(path.join(stageDir, MANIFEST_FILE), `${JSON.stringify(draft.manifest, null, 2)}\n`, {
      flag: 'wx',
    });
    await draft.build?.(stageDir, ctx);
    if (ctx.signal?.aborted)
      throw new CapsuleError('CANCELED', 'Canceled before the capability was stored; nothing was written.');

    const loaded = await loadCapability(stageDir, {
      root: await realpath(staging),
      projectRoot: ctx.workspace.root,
      protectedPaths: ctx.protectedPaths,
      inputValidator: ctx.registry.inputValidator,
    });
    if (!loaded.ok) {
      const issues = loaded.invalid.issues.map((i) => ({
        field: i.field,
        message: i.message,
        file: path.relative(stageDir, i.file) || draft.name,
      }));
      const first = issues[0];
      throw new CapsuleError(
        'MANIFEST_INVALID',
        `The generated capability is invalid: ${first?.field ?? first?.file ?? ''} ${first?.message ?? ''}; nothing was written.`.trim(),
        { field: first?.field, issues, hint: 'Fix the arguments named above and call the tool again.' },
      );
    }

    if (await exists(target)) {
      if (!args.overwrite) {
        throw new CapsuleError(
          'ALREADY_EXISTS',
          `A capability folder "${draft.name}" appeared in ${root} meanwhile; nothing was written.`,
          {
            field: 'name',
          },
        );
      }
      await rename(target, path.join(staging, `${draft.name}.old`));
      replaced = true;
    }
    try {
      await rename(stageDir, target);
    } catch (err) {
      // Put the old capability back rather than lose it with the staging folder.
      if (replaced) await rename(path.join(staging, `${draft.name}.old`), target).catch(() => undefined);
      throw err;
    }
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
  ctx.progress?.({ message: `stored ${draft.name}`, progress: 3, total: 3 });
  // The registry reads afresh: the new capability is visible without a restart.
  const capability = await ctx.registry.get(draft.name);
  return { ...capabilitySummary(capability, ctx), replaced };
}

/**
 * Key and subject are both the environment (`generate_capability:shell`), so rules name what gets
 * written — `generate_capability(shell)`, `generate_capability(sh*)`, or the tool, `generate_shell_capability`
 * — not the agent-chosen name, which says nothing about what will run. The name is in the prompt's text.
 */
function generateCheck(environment: Environment, name: string) {
  return askHost(
    makeKey(GENERATE_CAPABILITY, environment),
    environment,
    `writes the ${environment} capability folder "${name}" on the host (running it is asked separately)`,
  );
}

function generator<S extends z.ZodType>(
  name: string,
  environment: Environment,
  description: string,
  parameters: S,
  draftOf: (args: z.infer<S>) => Draft,
): AgentTool {
  return defineTool({
    name,
    description,
    kind: 'OTHER',
    parameters,
    async permission(args, ctx) {
      const draft = draftOf(args); // argument problems are reported before anyone is asked
      await chooseRoot(ctx, (args as { root?: string }).root, false);
      return generateCheck(environment, draft.name);
    },
    async execute(args, ctx) {
      const draft = draftOf(args);
      return writeDraft(draft, args as { root?: string; overwrite: boolean }, ctx);
    },
  });
}

export function createGenerateShellCapabilityTool(): AgentTool {
  return generator(
    'generate_shell_capability',
    'shell',
    'Write a new shell capability (a script run as a host process: NOT a sandbox). Validated before it becomes visible.',
    shellParameters,
    shellDraft,
  );
}

export function createGenerateWasmCapabilityTool(): AgentTool {
  return generator(
    'generate_wasm_capability',
    'wasm',
    'Write a new Wasm capability from a JavaScript module exporting run(input: string): string (componentized now), or from a prebuilt .wasm.',
    wasmParameters,
    wasmDraft,
  );
}

export function createGenerateDockerCapabilityTool(): AgentTool {
  return generator(
    'generate_docker_capability',
    'docker',
    'Write a new Docker capability: a script run in a locked-down container (image from runtimes/docker or a named one).',
    dockerParameters,
    dockerDraft,
  );
}
