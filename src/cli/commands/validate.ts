import { realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { CapsuleError } from '../../base/errors.js';
import { MANIFEST_FILE } from '../../project/environments.js';
import type { Capability, InvalidCapability } from '../../manifest/types.js';
import type { Registry } from '../../registry/registry.js';
import { action, json, write, type CliIO } from '../output.js';
import { EXIT } from '../exit-codes.js';

/** PATH may be a capability folder, its capability.json, or a root holding capability folders. */
async function validatePath(
  io: CliIO,
  target: string,
  projectRoot: string,
  registry: Registry,
  cacheDir: string,
  stateDir: string,
): Promise<{ capabilities: Capability[]; invalid: InvalidCapability[] }> {
  let st;
  try {
    st = await stat(target);
  } catch {
    throw new CapsuleError('NOT_FOUND', `${target} does not exist.`, {
      file: target,
      hint: 'Pass a capability folder, its capability.json, or a folder of capabilities.',
    });
  }
  let folder = target;
  if (st.isFile()) {
    if (path.basename(target) !== MANIFEST_FILE) {
      throw new CapsuleError('USAGE', `${target} is not a ${MANIFEST_FILE}.`, { file: target });
    }
    folder = path.dirname(target);
  } else {
    try {
      await stat(path.join(target, MANIFEST_FILE));
    } catch {
      // No manifest here: treat it as a root of capability folders.
      const { cliRegistry } = await import('../session.js');
      return cliRegistry(io, projectRoot, [target], registry.inputValidator).scan();
    }
  }
  const [{ loadCapability }, { protectedPaths }] = await Promise.all([
    import('../../manifest/load.js'),
    import('../../project/protected-state.js'),
  ]);
  const loaded = await loadCapability(folder, {
    root: await realpath(path.dirname(path.resolve(folder))),
    projectRoot: await realpath(projectRoot),
    protectedPaths: protectedPaths(projectRoot, cacheDir, stateDir).all,
    capabilityRoots: registry.roots,
    inputValidator: registry.inputValidator,
  });
  return loaded.ok
    ? { capabilities: [loaded.capability], invalid: [] }
    : { capabilities: [], invalid: [loaded.invalid] };
}

export function registerValidate(program: Command, io: CliIO): void {
  program
    .command('validate')
    .description(
      'Validate capability manifests. Exits 1 and names file, field and reason for every invalid one.',
    )
    .argument(
      '[path]',
      'a capability folder, a capability.json, or a folder of capabilities (default: the project roots)',
    )
    .option('--json', 'print JSON: {valid, invalid}')
    .action(
      action(io, async (target: string | undefined, opts: { json?: boolean }) => {
        const [{ openProject, cliStateDir }, { userCacheDir }] = await Promise.all([
          import('../session.js'),
          import('../../base/cache-dir.js'),
        ]);
        const { project, registry } = await openProject(io);
        const result =
          target === undefined
            ? await registry.scan()
            : await validatePath(
                io,
                path.resolve(io.cwd, target),
                project.root,
                registry,
                userCacheDir(io.env),
                cliStateDir(io),
              );
        if (opts.json) {
          await write(
            io.stdout,
            json({
              valid: result.capabilities.map((c) => ({ name: c.name, contentHash: c.contentHash })),
              invalid: result.invalid,
            }),
          );
        } else {
          let out = '';
          for (const c of result.capabilities)
            out += `ok      ${c.name} (${c.environment}, ${c.contentHash.slice(0, 19)})\n`;
          await write(io.stdout, out);
          let err = '';
          for (const inv of result.invalid) {
            err += `invalid ${inv.folder}\n`;
            for (const i of inv.issues) err += `  ${i.file}: ${i.field ?? '(file)'}: ${i.message}\n`;
          }
          await write(io.stderr, err);
          if (result.capabilities.length === 0 && result.invalid.length === 0)
            await write(io.stderr, 'no capabilities found\n');
        }
        return result.invalid.length > 0 ? EXIT.FAILURE : EXIT.OK;
      }),
    );
}
