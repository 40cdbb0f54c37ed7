import path from 'node:path';
import { Option, type Command } from 'commander';
import { CapsuleError } from '../../base/errors.js';
import { ENVIRONMENTS } from '../../project/environments.js';
import type { Environment } from '../../manifest/types.js';
import type { Draft } from '../../tools/capability-drafts.js';
import { EXIT } from '../exit-codes.js';
import { action, cancelOnSignals, CliExit, json, progressLine, write, type CliIO } from '../output.js';

interface NewFlags {
  env: Environment;
  from?: string | undefined;
  description?: string | undefined;
  interpreter?: string | undefined;
  root?: string | undefined;
  json?: boolean | undefined;
}

const INTERPRETER_FOR_EXTENSION: Readonly<Record<string, string>> = {
  '.sh': 'sh',
  '.bash': 'bash',
  '.js': 'node',
  '.mjs': 'node',
  '.py': 'python3',
};

/** The program a scaffold starts from: it echoes its input, so the first run shows the contract. */
function template(name: string, environment: Environment, interpreter: string): string {
  if (environment === 'wasm' || interpreter === 'node') {
    const io =
      environment === 'wasm'
        ? '// Input: the JSON document as text; the text returned is stdout. Files and environment:\n' +
          '// docs/runners.md, "The JavaScript authoring world".\n'
        : "// Input: the JSON document on stdin; what it prints is stdout.\nimport { readFileSync } from 'node:fs';\n\n";
    const body =
      environment === 'wasm'
        ? 'export function run(input) {\n  const doc = JSON.parse(input);\n  return `${JSON.stringify({ received: doc })}\\n`;\n}\n'
        : "const doc = JSON.parse(readFileSync(0, 'utf8'));\nprocess.stdout.write(`${JSON.stringify({ received: doc })}\\n`);\n";
    return `// ${name}: scaffolded by capsule new.\n${io}${body}`;
  }
  if (interpreter === 'python3') {
    return `# ${name}: scaffolded by capsule new. Input: the JSON document on stdin.\nimport json, sys\n\nprint(json.dumps({"received": json.load(sys.stdin)}, separators=(",", ":")))\n`;
  }
  return `# ${name}: scaffolded by capsule new. Input: the JSON document on stdin; stdout is the output.\ninput=$(cat)\nprintf '{"received":%s}\\n' "$input"\n`;
}

async function readFrom(file: string, cwd: string): Promise<{ text: string; bytes: Buffer; path: string }> {
  const { readFile } = await import('node:fs/promises');
  const full = path.resolve(cwd, file);
  let bytes: Buffer;
  try {
    bytes = await readFile(full);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new CapsuleError(
      'NOT_FOUND',
      `--from ${file} cannot be read (${code}); nothing was written.`,
      {
        file: full,
        field: '--from',
        hint: 'Give a readable file: a JavaScript module (wasm), or the script to run (shell, docker).',
      },
      { cause: err },
    );
  }
  return { text: bytes.toString('utf8'), bytes, path: full };
}

/** The generate tools' arguments for this scaffold, parsed by the same schemas. */
async function draftFor(
  name: string,
  flags: NewFlags,
  io: CliIO,
): Promise<{ draft: Draft; template: boolean }> {
  const drafts = await import('../../tools/capability-drafts.js');
  const from = flags.from === undefined ? undefined : await readFrom(flags.from, io.cwd);
  const fromExt = from === undefined ? undefined : path.extname(from.path).toLowerCase();
  const interpreter =
    flags.interpreter ?? (fromExt !== undefined ? INTERPRETER_FOR_EXTENSION[fromExt] : undefined) ?? 'sh';
  const description =
    flags.description ?? `A ${flags.env} capability (scaffolded by capsule new; describe what it does).`;
  const common = { name, description, ...(flags.root !== undefined ? { root: flags.root } : {}) };
  const program = from?.text ?? template(name, flags.env, interpreter);
  const parse = <T>(
    schema: {
      safeParse(
        v: unknown,
      ):
        | { success: true; data: T }
        | { success: false; error: { issues: Array<{ path: PropertyKey[]; message: string }> } };
    },
    args: unknown,
  ): T => {
    const parsed = schema.safeParse(args);
    if (parsed.success) return parsed.data;
    const issue = parsed.error.issues[0];
    const field = String(issue?.path[0] ?? '');
    const flag =
      field === 'name' ? 'NAME' : field === 'source' || field === 'script' ? '--from' : `--${field}`;
    throw new CapsuleError('USAGE', `${flag}: ${issue?.message ?? 'invalid'}; nothing was written.`, {
      field: flag,
      hint:
        field === 'name'
          ? 'NAME is 1-64 of a-z, 0-9, "-" or "_", starting with a letter or digit.'
          : undefined,
    });
  };
  let draft: Draft;
  if (flags.env === 'wasm') {
    // A prebuilt .wasm (by its header) is stored as it is; anything else is JavaScript to build.
    const prebuilt =
      from !== undefined && from.bytes.subarray(0, 4).equals(Buffer.from([0, 0x61, 0x73, 0x6d]));
    draft = drafts.wasmDraft(
      parse(drafts.wasmParameters, {
        ...common,
        ...(prebuilt ? { wasmBase64: from.bytes.toString('base64') } : { source: program }),
      }),
    );
  } else {
    const args = { ...common, script: program, interpreter };
    draft =
      flags.env === 'shell'
        ? drafts.shellDraft(parse(drafts.shellParameters, args))
        : drafts.dockerDraft(parse(drafts.dockerParameters, args));
  }
  return { draft, template: from === undefined };
}

/** `capsule new`: scaffolds a capability folder through the generate_* tools' drafts and staged install. */
export function registerNew(program: Command, io: CliIO): void {
  program
    .command('new')
    .description(
      'Scaffold a capability folder in the first capability root: a manifest and a program that echoes its\n' +
        'input (or the program in --from). For wasm, JavaScript is built into a Wasm component now.\n' +
        'Built beside the target and renamed into place: a failure leaves nothing behind.',
    )
    .argument('<name>', 'capability name (1-64 of a-z, 0-9, "-", "_"); becomes the folder name')
    .addOption(new Option('--env <env>', 'where it runs').choices([...ENVIRONMENTS]).makeOptionMandatory())
    .option(
      '--from <file>',
      'start from this file: a JavaScript module or a prebuilt .wasm (wasm), the script (shell, docker)',
    )
    .option('--description <text>', 'what the capability does (for people and agents)')
    .addOption(
      new Option(
        '--interpreter <name>',
        'shell/docker: the program that runs the script (default: from the --from extension, else sh)',
      ).choices(['sh', 'bash', 'node', 'python3']),
    )
    .option('--root <dir>', 'the capability root to write into (default: the first configured root)')
    .option(
      '--json',
      'print the new capability as JSON: {name, environment, dir, contentHash, sandboxed, isolation}',
    )
    .action(
      action(io, async (name: string, flags: NewFlags) => {
        const { draft, template } = await draftFor(name, flags, io);
        if (template) {
          // The scaffold's own check, so `capsule ci` has something to run from the start.
          draft.files.set(
            'cases.json',
            `${JSON.stringify({ schemaVersion: 1, cases: [{ name: 'echoes its input', input: { hello: 'world' }, expect: { json: { received: { hello: 'world' } } } }] }, null, 2)}\n`,
          );
        }
        const [{ openProject, cliStateDir }, { userCacheDir }, { protectedPaths }, { Workspace }] =
          await Promise.all([
            import('../session.js'),
            import('../../base/cache-dir.js'),
            import('../../project/protected-state.js'),
            import('../../tools/workspace.js'),
          ]);
        const { project, registry } = await openProject(io);
        const cacheDir = userCacheDir(io.env);
        const stateDir = cliStateDir(io);
        const [{ installDraft }, { defaultIsolation }, { componentizeJs }, workspace] = await Promise.all([
          import('../../tools/capability-install.js'),
          import('../../executor/isolation.js'),
          import('../../runners/wasm/componentize.js'),
          Workspace.open({ projectRoot: project.root, alsoProtected: [cacheDir], alsoHidden: [stateDir] }),
        ]);
        const progress = progressLine(io, 'new', { json: flags.json });
        // Ctrl-C: the build step finishes (componentizing cannot be interrupted), then the install
        // sees the signal and removes its staging folder, so nothing is left behind.
        const cancel = cancelOnSignals(io.signals, ['SIGINT']);
        const result = await installDraft(
          draft,
          { root: flags.root, overwrite: false },
          {
            registry,
            workspace,
            protectedPaths: protectedPaths(workspace.root, cacheDir, stateDir).all,
            isolation: (c) => defaultIsolation(c),
            progress: (p) => progress(p.message),
            signal: cancel.signal,
            componentize: async (source, options) =>
              (
                await componentizeJs(source, {
                  file: flags.from ?? `${name}/source.js`,
                  onProgress: (e) => options.onProgress?.(e.message),
                })
              ).component,
          },
        )
          .finally(() => cancel.detach())
          .catch((err: unknown) => {
            if (cancel.signal.aborted) {
              void io.stderr.write('capsule new: canceled; nothing was written\n');
              throw new CliExit(EXIT.CANCELED);
            }
            // The tools' hint speaks of their overwrite argument; here the person chooses.
            if (err instanceof CapsuleError && err.code === 'ALREADY_EXISTS') {
              throw new CapsuleError(err.code, err.message, {
                ...err.details,
                field: 'NAME',
                hint: 'Choose another NAME, or move the existing folder away first.',
              });
            }
            throw err;
          });
        if (flags.json) {
          await write(io.stdout, json(result));
        } else {
          await write(
            io.stdout,
            `created ${result.name} (${result.environment}) in ${result.dir}\n` +
              `  ${result.isolation}\n` +
              `run it: capsule run ${result.name} --grant run_capability:${result.name} --input '{"hello":"world"}'\n`,
          );
        }
        return EXIT.OK;
      }),
    );
}
