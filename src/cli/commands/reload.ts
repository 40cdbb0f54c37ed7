import type { Command } from 'commander';
import { EXIT } from '../exit-codes.js';
import { action, json, write, type CliIO } from '../output.js';

export function registerReload(program: Command, io: CliIO): void {
  program
    .command('reload')
    .description(
      "Show how capsule.json's policy (rules, mode, allowlist, engines) and the project profiles differ from the\n" +
        'policy a person last confirmed for this project, and ask in the terminal whether to adopt it.\n' +
        'Until then, sessions and commands keep the confirmed policy (changes that only tighten it apply at once).\n' +
        'No terminal or --no-prompt: shows the difference, changes nothing, exits 77.',
    )
    .option('--json', 'print {file, root, snapshot, firstConfirmation, changed, diff, confirmed}')
    .option('--no-prompt', 'never ask: show the difference and exit 77 if there is one')
    .action(
      action(io, async (opts: { json?: boolean; prompt: boolean }) => {
        const [
          { loadProjectConfig, projectConfigSchema },
          { policyChange, policyViewOf, readProfileHashes },
          { PolicySnapshotStore },
          { askYesNo },
          { cliStateDir },
        ] = await Promise.all([
          import('../../config/project-config.js'),
          import('../../permissions/policy-diff.js'),
          import('../../permissions/policy-snapshot.js'),
          import('../../permissions/prompter.js'),
          import('../session.js'),
        ]);
        const project = await loadProjectConfig(io.cwd);
        const store = new PolicySnapshotStore({ stateDir: cliStateDir(io) });
        const snapshot = await store.read(project.root);
        const { file: snapshotFile } = await store.fileFor(project.root);
        const onDisk = policyViewOf(project.config, await readProfileHashes(project.root));
        // Never confirmed: the difference is everything that is not a default.
        const baseline = snapshot?.policy ?? policyViewOf(projectConfigSchema.parse({}));
        const change = policyChange(project.file, baseline, onDisk);
        const report = async (confirmed: boolean, message: string): Promise<void> => {
          if (opts.json === true) {
            await write(
              io.stdout,
              json({
                file: project.file,
                root: project.root,
                snapshot: snapshotFile,
                firstConfirmation: snapshot === undefined,
                changed: change !== undefined,
                diff: change?.lines ?? [],
                confirmed,
                message,
              }),
            );
          } else {
            await write(io.stderr, `capsule: ${message}\n`);
          }
        };
        if (change === undefined) {
          if (snapshot === undefined) await store.write(project.root, onDisk, 'capsule reload');
          await report(true, `The policy of ${project.file} is the confirmed one; nothing to do.`);
          return EXIT.OK;
        }
        await write(
          io.stderr,
          `${snapshot === undefined ? `capsule: no policy was confirmed for ${project.root} yet; on disk:\n${change.lines.map((l) => `  ${l}`).join('\n')}` : change.text}\n`,
        );
        if (!opts.prompt || !io.interactive) {
          await report(
            false,
            `Not confirmed: no person can be asked here (${!opts.prompt ? '--no-prompt' : 'no terminal'}), so nothing changed. Run capsule reload in a terminal to review and confirm it.`,
          );
          return EXIT.DENIED;
        }
        const yes = await askYesNo(
          { input: io.stdin(), output: io.stderr },
          'Adopt this policy for the project?',
        );
        if (!yes) {
          await report(false, 'Not confirmed: the confirmed policy stays in effect.');
          return EXIT.DENIED;
        }
        await store.write(project.root, onDisk, 'capsule reload');
        await report(true, `Confirmed: the policy of ${project.file} is in effect from now on.`);
        return EXIT.OK;
      }),
    );
}
