import { Option, type Command } from 'commander';
import { CapsuleError } from '../../base/errors.js';
import type { LearnInput, LearnReport } from '../../learn/learn.js';
import type { unifiedDiff as UnifiedDiff } from '../../base/text-diff.js';
import { EXIT } from '../exit-codes.js';
import { addEngineFlag, addGateFlags, sessionFlags, type GateFlags } from '../flags.js';
import { action, cancelOnSignals, json, progressLine, write, type CliIO } from '../output.js';

type LearnOptions = GateFlags & {
  input: string[];
  promote?: 'docker' | 'wasm';
  write?: boolean;
  yes?: boolean;
  json?: boolean;
};

function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

function parseInputs(texts: readonly string[]): LearnInput[] | undefined {
  if (texts.length === 0) return undefined;
  return texts.map((text, i) => {
    try {
      return { name: `--input ${i + 1}`, input: JSON.parse(text) as unknown };
    } catch (err) {
      throw new CapsuleError(
        'INPUT_INVALID',
        `--input ${i + 1} is not valid JSON: ${(err as Error).message}`,
        { field: '--input', hint: `Quote the JSON for your shell, e.g. --input '{"name":"world"}'.` },
        { cause: err },
      );
    }
  });
}

/** The report for a person: the grants against the manifest's, what was seen, the proof. */
export async function renderLearn(report: LearnReport, unifiedDiff: typeof UnifiedDiff): Promise<string> {
  const { proposal, proof } = report;
  const lines: string[] = [];
  const target = proposal.target;
  lines.push(
    target.name === proposal.capability
      ? `Proposed grants for ${proposal.capability} (${target.environment}):`
      : `Proposed: ${target.name}, ${proposal.capability} promoted to ${target.environment}${target.image !== undefined ? ` (${target.image})` : ''}:`,
  );
  const diff = unifiedDiff(
    `${JSON.stringify({ grants: proposal.current }, null, 2)}\n`,
    `${JSON.stringify({ grants: proposal.grants }, null, 2)}\n`,
    { old: `${proposal.capability}/capability.json`, new: `${target.name}/capability.json (proposed)` },
    20,
  );
  lines.push(diff.identical ? '  (the same grants as the manifest)' : diff.diff.trimEnd());
  const flagged = report.observed.filter((o) => o.verdict !== 'proposed');
  if (flagged.length > 0) {
    lines.push('', 'Seen and NOT proposed:');
    for (const o of flagged) {
      const what = o.path ?? `${o.host ?? ''}:${o.port ?? ''}`;
      lines.push(`  ${o.op} ${what} [${o.verdict}]${o.note !== undefined ? ` — ${o.note}` : ''}`);
    }
  }
  const notes = report.observed.filter((o) => o.verdict === 'proposed' && o.host !== undefined && o.note);
  for (const o of notes) lines.push(`  note: ${o.host}:${o.port}: ${o.note}`);
  if (report.outside.length > 0) {
    const byWhat = new Map<string, number>();
    for (const o of report.outside) byWhat.set(o.what, (byWhat.get(o.what) ?? 0) + 1);
    lines.push('', 'Outside the project (reported, never proposed; --json lists each):');
    for (const [what, n] of byWhat) lines.push(`  ${n} × ${what}`);
  }
  if (proposal.ceiling !== undefined) {
    lines.push(
      '',
      `Ceiling: ${proposal.ceiling.sandboxed ? 'sandboxed — it can be allowed for the project' : 'NOT sandboxed — it can be allowed for this session at most'}`,
      `  ${proposal.ceiling.why}`,
    );
  }
  if (proposal.unobserved.length > 0) {
    lines.push('', 'Not observable here (not guessed):');
    for (const u of proposal.unobserved) lines.push(`  - ${u}`);
  }
  lines.push(
    '',
    `Proof in ${proof.environment}: ${proof.ok ? 'PASSED' : 'FAILED'}${proof.failure ? ` — ${proof.failure}` : ''}`,
  );
  for (const r of proof.runs) {
    const verdict =
      r.casePassed === undefined
        ? ''
        : r.casePassed
          ? ', case passed'
          : `, case FAILED (${r.caseMessage ?? ''})`;
    lines.push(
      `  ${r.equal ? 'same output' : 'DIFFERENT output'}: ${r.input} (exit ${r.exitCode ?? 'none'})${verdict}`,
    );
  }
  for (const m of proof.minimality)
    lines.push(
      `  ${m.unneeded ? 'UNNEEDED' : 'needed  '}: ${m.grant}${m.unneeded ? ' (dropping it changed no output)' : ''}`,
    );
  if (proof.minimalityNote !== undefined) lines.push(`  minimality ${proof.minimalityNote}`);
  return `${lines.join('\n')}\n`;
}

export function registerLearn(program: Command, io: CliIO): void {
  addGateFlags(
    addEngineFlag(
      program
        .command('learn')
        .description(
          'Learn the grants a capability needs: run it through the gate (a normal run, marked as learning) for each\n' +
            "--input or each case of its cases.json, observe what it reaches, propose grants in the manifest's shape,\n" +
            'prove them (re-run with exactly those grants and compare; drop each in turn to find unneeded ones) and,\n' +
            "with --write and a person's yes, write them.",
        )
        .argument('<name>', 'capability name (see capsule list)')
        .option(
          '--input <json>',
          'an input to learn from (repeatable; default: the cases of its cases.json)',
          collect,
          [],
        )
        .addOption(
          new Option(
            '--promote <environment>',
            'prove and write a new capability NAME-ENV with the learned grants',
          ).choices(['docker', 'wasm']),
        )
        .option(
          '--write',
          'write the proved grants (capability.json, or the promoted capability) after a yes',
        )
        .option(
          '--yes',
          'with --write: the person running this says yes in advance (never implied by --no-prompt)',
        )
        .option('--json', 'print {"proposal", "observed", "outside", "proof"} as JSON'),
    ),
  ).action(
    action(io, async (name: string, opts: LearnOptions) => {
      const inputs = parseInputs(opts.input);
      const [{ learnCapability }, { unifiedDiff }, { askYesNo }, { openSession }] = await Promise.all([
        import('../../learn/learn.js'),
        import('../../base/text-diff.js'),
        import('../../permissions/prompter.js'),
        import('../session.js'),
      ]);
      const session = await openSession(io, sessionFlags(opts, { command: 'learn', json: opts.json }));
      // Ctrl-C stops the run at once; nothing is written (every write is one rename at the very end).
      const cancel = cancelOnSignals(io.signals, ['SIGINT', 'SIGTERM']);
      try {
        const learned = await learnCapability({
          executor: session.executor,
          name,
          inputs,
          promote: opts.promote,
          place: {
            projectRoot: session.project.root,
            capabilityRoots: await session.realRoots(),
            protectedPaths: session.protectedPaths,
          },
          signal: cancel.signal,
          onProgress: progressLine(io, 'learn', { json: opts.json }),
        });
        let written: string | undefined;
        let message: string;
        try {
          const { report } = learned;
          if (!opts.json) await write(io.stdout, await renderLearn(report, unifiedDiff));
          if (!opts.write) message = 'Nothing written (add --write to write it).';
          else if (!report.proof.ok) message = 'The proof failed: nothing written.';
          else if (!opts.prompt)
            message = 'Not written: --no-prompt never writes (a person says yes, or --yes).';
          else if (opts.yes === true && cancel.signal.aborted !== true) written = await learned.write();
          else if (!io.interactive)
            message = 'Not written: no terminal to ask a person (--yes writes without asking).';
          else if (
            await askYesNo(
              { input: io.stdin(), output: io.stderr },
              `Write ${report.proposal.target.name}?`,
              cancel.signal,
            )
          )
            written = await learned.write();
          else message = 'Not written: the answer was no.';
          message ??= `Written: ${written ?? ''}`;
        } finally {
          await learned.remove();
        }
        const report = learned.report;
        if (opts.json)
          await write(
            io.stdout,
            json({
              proposal: { ...report.proposal, written: written ?? null },
              observed: report.observed,
              outside: report.outside,
              proof: report.proof,
            }),
          );
        else await write(io.stderr, `capsule learn: ${message}\n`);
        if (!report.proof.ok) return EXIT.FAILURE;
        if (opts.write === true && written === undefined) return EXIT.DENIED;
        return EXIT.OK;
      } finally {
        cancel.detach();
        await session.close();
      }
    }),
  );
}
