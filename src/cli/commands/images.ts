import type { Command } from 'commander';
import { CapsuleError } from '../../base/errors.js';
import type { DockerodeEngine } from '../../runners/docker/dockerode-engine.js';
import { IMAGE_RECIPES } from '../../runners/docker/image-recipes.js';
import { EXIT } from '../exit-codes.js';
import { action, json, write, type CliIO } from '../output.js';

async function connect(io: CliIO): Promise<DockerodeEngine> {
  const [{ connectDefaultEngine }, { engineMessage }, { isNoEngine, noEngineLine }] = await Promise.all([
    import('../../runtime/engines.js'),
    import('../../runners/docker/dockerode-engine.js'),
    import('../../runners/docker/engine.js'),
  ]);
  const engine = connectDefaultEngine(io.env);
  try {
    await engine.ping(5000);
  } catch (err) {
    const where = io.env['DOCKER_HOST'] ?? 'unix:///var/run/docker.sock';
    throw new CapsuleError(
      'RUNNER_UNAVAILABLE',
      isNoEngine(err)
        ? noEngineLine(where)
        : `the Docker engine at ${where} is not usable: ${engineMessage(err)}`,
      {},
      { cause: err },
    );
  }
  return engine;
}

/** `capsule images list|build`: the offline sandbox images from runtimes/docker. */
export function registerImages(program: Command, io: CliIO): void {
  const images = program
    .command('images')
    .description(
      'The Docker sandbox images capsule builds offline from runtimes/docker (no registry needed).',
    );

  images
    .command('list')
    .description('Show each image capsule can build and whether the engine has it.')
    .option('--json', 'print JSON: [{tag, folder, present}]')
    .action(
      action(io, async (opts: { json?: boolean }) => {
        const engine = await connect(io);
        const rows = await Promise.all(
          IMAGE_RECIPES.map(async (r) => ({
            tag: r.tag,
            folder: `runtimes/docker/${r.folder}`,
            present: await engine.imageExists(r.tag),
          })),
        );
        if (opts.json) {
          await write(io.stdout, json(rows));
        } else {
          const width = Math.max(...rows.map((r) => r.tag.length));
          await write(
            io.stdout,
            rows
              .map((r) => `${r.tag.padEnd(width)}  ${r.present ? 'present' : 'missing'}  ${r.folder}`)
              .join('\n') + '\n',
          );
        }
        return EXIT.OK;
      }),
    );

  images
    .command('build')
    .description(
      'Build the sandbox images (all, or the TAGs given); current ones are skipped unless --force.',
    )
    .argument('[tags...]', `images to build: ${IMAGE_RECIPES.map((r) => r.tag).join(', ')}`)
    .option('--force', 'rebuild even when the image exists')
    .option('--json', 'print JSON: [{tag, built}] (build progress stays on stderr)')
    .action(
      action(io, async (tags: string[], opts: { force?: boolean; json?: boolean }) => {
        const unknown = tags.filter((t) => !IMAGE_RECIPES.some((r) => r.tag === t));
        if (unknown.length > 0) {
          throw new CapsuleError('USAGE', `unknown image ${unknown.join(', ')}`, {
            hint: `capsule builds ${IMAGE_RECIPES.map((r) => r.tag).join(', ')}`,
          });
        }
        const engine = await connect(io);
        const { openImageBuilder } = await import('../../runtime/engines.js');
        const builder = openImageBuilder(engine);
        const report: { tag: string; built: boolean }[] = [];
        for (const recipe of IMAGE_RECIPES) {
          if (tags.length > 0 && !tags.includes(recipe.tag)) continue;
          if (opts.force === true) {
            await builder.build(recipe, (message) => void write(io.stderr, `${message}\n`));
            report.push({ tag: recipe.tag, built: true });
            continue;
          }
          // Builds when missing or built from other inputs (a new host node, an edited Dockerfile).
          let built = false;
          await builder.ensure(recipe.tag, (message) => {
            built = true;
            void write(io.stderr, `${message}\n`);
          });
          report.push({ tag: recipe.tag, built });
          if (!built && opts.json !== true)
            await write(io.stderr, `${recipe.tag}: present and current (use --force to rebuild)\n`);
        }
        if (opts.json === true) await write(io.stdout, json(report));
        return EXIT.OK;
      }),
    );
}
