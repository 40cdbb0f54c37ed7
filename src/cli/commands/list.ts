import type { Command } from 'commander';
import { action, json, write, type CliIO } from '../output.js';
import { EXIT } from '../exit-codes.js';

export function registerList(program: Command, io: CliIO): void {
  program
    .command('list')
    .description('List the capabilities found under the project roots (invalid ones are reported on stderr).')
    .option('--json', 'print JSON: {capabilities, invalid, missingRoots}')
    .action(
      action(io, async (opts: { json?: boolean }) => {
        const { openProject } = await import('../session.js');
        const { registry } = await openProject(io);
        const scan = await registry.scan();
        if (opts.json) {
          await write(
            io.stdout,
            json({
              capabilities: scan.capabilities.map((c) => ({
                name: c.name,
                environment: c.environment,
                description: c.manifest.description,
                contentHash: c.contentHash,
                dir: c.dir,
              })),
              invalid: scan.invalid,
              missingRoots: scan.missingRoots,
            }),
          );
          return EXIT.OK;
        }
        if (scan.capabilities.length === 0) {
          await write(io.stdout, `No capabilities in ${registry.roots.join(', ')}.\n`);
        } else {
          const width = Math.max(...scan.capabilities.map((c) => c.name.length), 4);
          const lines = scan.capabilities.map(
            (c) =>
              `${c.name.padEnd(width)}  ${c.environment.padEnd(6)}  ${c.manifest.description.split('\n')[0] ?? ''}`,
          );
          await write(io.stdout, `${'NAME'.padEnd(width)}  ENV     DESCRIPTION\n${lines.join('\n')}\n`);
        }
        if (scan.invalid.length > 0) {
          await write(
            io.stderr,
            `${scan.invalid.length} invalid capability folder(s) skipped: ${scan.invalid.map((i) => i.folder).join(', ')} (run "capsule validate" for details)\n`,
          );
        }
        for (const root of scan.missingRoots)
          await write(io.stderr, `capability root ${root} does not exist\n`);
        return EXIT.OK;
      }),
    );
}
