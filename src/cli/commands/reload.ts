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
    .option(
      '--json',
      'print {file, root, snapshot, firstConfirmation, untrusted: {kind, problem} | null, changed, diff, confirmed, message}',
    )
    .option('--no-prompt', 'never ask: show the difference and exit 77 if there is one')
    .action(
      action(io, async (opts: { json?: boolean; prompt: boolean }) => {
        const [
          { loadProjectConfig, projectConfigSchema },
          { policyChange, policyViewOf, readProfileHashes },
          { askYesNo },
          { cliPolicySnapshots },
        ] = await Promise.all([
          import('../../project/project-config.js'),
          import('../../permissions/policy-diff.js'),
          import('../../permissions/prompter.js'),
          import('../session.js'),
        ]);
        const project = await loadProjectConfig(io.cwd);
        const store = cliPolicySnapshots(io);
        const read = await store.load(project.root);
        const snapshot = read.state === 'confirmed' ? read.snapshot : undefined;
        const untrusted = read.state === 'untrusted' ? read : undefined;
        const snapshotFile = read.file;
        const onDisk = policyViewOf(project.config, await readProfileHashes(project.root));
        // Never confirmed, or the snapshot there is not a confirmation: the difference is everything
        // that is not a default.
        const baseline = snapshot?.policy ?? policyViewOf(projectConfigSchema.parse({}));
        const change = policyChange(project.file, baseline, onDisk);
        if (untrusted !== undefined) {
          await write(
            io.stderr,
            `capsule: the confirmed policy is not trusted: ${untrusted.problem}. Nothing runs in this project until a person confirms its policy again; the difference below is from capsule's defaults.\n`,
          );
        }
        const report = async (confirmed: boolean, message: string): Promise<void> => {
          if (opts.json === true) {
            await write(
              io.stdout,
              json({
                file: project.file,
                root: project.root,
                snapshot: snapshotFile,
                firstConfirmation: read.state === 'none',
                untrusted:
                  untrusted !== undefined ? { kind: untrusted.kind, problem: untrusted.problem } : null,
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
        // An untrusted snapshot is replaced only on a person's yes, even by the defaults: the policy it
        // stands in for (its deny rules too) is unknown, so nothing may re-establish trust by itself.
        if (change === undefined && untrusted === undefined) {
          // Never confirmed and nothing beyond the defaults: recording it widens nothing.
          if (snapshot === undefined) await store.write(project.root, onDisk, 'capsule reload');
          await report(true, `The policy of ${project.file} is the confirmed one; nothing to do.`);
          return EXIT.OK;
        }
        const shown =
          change === undefined
            ? `capsule: ${project.file} holds capsule's default policy (nothing to review beyond it).`
            : snapshot === undefined
              ? `capsule: ${untrusted !== undefined ? 'no trusted confirmation' : 'no policy was confirmed'} for ${project.root} yet; on disk:\n${change.lines.map((l) => `  ${l}`).join('\n')}`
              : change.text;
        await write(io.stderr, `${shown}\n`);
        if (!opts.prompt || !io.interactive) {
          await report(
            false,
            `Not confirmed: no person can be asked here (${!opts.prompt ? '--no-prompt' : 'no terminal'}), so nothing changed${untrusted !== undefined ? ` (the untrusted snapshot ${untrusted.file} confirms nothing)` : ''}. Run capsule reload in a terminal to review and confirm it.`,
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
