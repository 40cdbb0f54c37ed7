import { z } from 'zod';
import type { Executor } from '../executor/executor.js';
import { learnCapability, type LearnInput } from '../learn/learn.js';
import type { LearnPlace } from '../learn/classify.js';
import { learnResultSchema, type LearnResultDocument } from '../learn/report-schema.js';
import { defineTool, askNone, type AgentTool } from '../tools/define.js';

/** What a person is shown before learned grants are written, and their answer (true only for a yes). */
export type WriteConfirmer = (
  question: { target: string; text: string },
  signal?: AbortSignal,
) => Promise<boolean>;

export interface LearnToolOptions {
  executor: Executor;
  /** Where the learning runs run (real paths), read at each call: roots may appear. */
  place: () => Promise<Omit<LearnPlace, 'ownDirs' | 'home' | 'tmp'>>;
  /** Who says yes to a write (MCP: an elicitation). Undefined: nobody, so nothing is ever written. */
  confirmWrite?: WriteConfirmer | undefined;
}

const MAX_INPUTS = 32;

const learnCapabilityParameters = z.strictObject({
  name: z.string().min(1).max(64).describe('Capability name, as listed by list_capabilities.'),
  inputs: z
    .array(z.unknown())
    .min(1)
    .max(MAX_INPUTS)
    .optional()
    .describe(
      'Input documents to learn from (each validated against its input schema). Omitted: the cases of its cases.json.',
    ),
  promote: z
    .enum(['docker', 'wasm'])
    .optional()
    .describe(
      'Prove the grants in this environment, as a new capability NAME-docker beside it (a read-only one is sandboxed and can be allowed for the project).',
    ),
  write: z
    .boolean()
    .default(false)
    .describe(
      'Write the proved grants (capability.json, or the promoted capability) — only after a person says yes to an elicitation; never without one.',
    ),
});

/** What a person reads before a write: the target, the grants and the proof, one field per line. */
function writeQuestion(doc: LearnResultDocument): { target: string; text: string } {
  const { proposal, proof } = doc;
  const promoted = proposal.target.name !== proposal.capability;
  const lines = [
    promoted
      ? `capsule: the agent asks to write a new capability ${proposal.target.name}: ${proposal.capability} promoted to ${proposal.target.environment}${proposal.target.image !== undefined ? ` (${proposal.target.image})` : ''}, with the learned grants.`
      : `capsule: the agent asks to write the learned grants into ${proposal.capability}/capability.json (its content hash changes: earlier grants of it no longer apply).`,
    `Grants: ${JSON.stringify(proposal.grants)}`,
    `Before: ${JSON.stringify(proposal.current)}`,
    `Proof in ${proof.environment}: ${proof.runs.length} run(s) with exactly these grants agreed with the learning run.`,
  ];
  const unneeded = proof.minimality.filter((m) => m.unneeded).map((m) => m.grant);
  if (unneeded.length > 0)
    lines.push(`Flagged unneeded (dropping it changed nothing): ${unneeded.join('; ')}`);
  if (proposal.ceiling !== undefined)
    lines.push(
      `${proposal.ceiling.sandboxed ? 'Sandboxed: it can be allowed for the project' : 'NOT sandboxed: a session grant at most'} (${proposal.ceiling.why}).`,
    );
  for (const u of proposal.unobserved) lines.push(`Not observed: ${u}`);
  return { target: proposal.target.name, text: lines.join('\n') };
}

/**
 * learn_capability: `capsule learn` for agents. Every run it makes (learning, proof, minimality) goes
 * through the gate as run_capability:<name> — the same key, prompt, ceiling and audit record as a run,
 * marked as learning — so the tool itself asks nothing more. A write happens only on a person's yes.
 */
export function createLearnCapabilityTool(options: LearnToolOptions): AgentTool {
  return defineTool({
    name: 'learn_capability',
    description:
      'Learn the grants a capability needs: run it on the inputs or its cases (each run asks run_capability:<name>), propose the files, hosts and ports it reached as grants, and prove them by re-running with exactly those. write: true writes them if a person says yes.',
    kind: 'OTHER',
    parameters: learnCapabilityParameters,
    output: learnResultSchema,
    // Nothing is decided here: each run inside is its own gate decision on run_capability:<name>.
    async permission(args) {
      return askNone(args.name);
    },
    async execute(args, ctx) {
      const inputs: LearnInput[] | undefined = args.inputs?.map((input, i) => ({
        name: `inputs[${i}]`,
        input,
      }));
      const learned = await learnCapability({
        executor: options.executor,
        name: args.name,
        inputs,
        promote: args.promote,
        place: await options.place(),
        signal: ctx.signal,
        onProgress: (message) => ctx.progress?.({ message, progress: 0 }),
      });
      const { report } = learned;
      const doc: LearnResultDocument = {
        proposal: { ...report.proposal, written: null },
        observed: report.observed,
        outside: report.outside,
        proof: report.proof,
      };
      try {
        if (!args.write) doc.message = 'Nothing written (write: true asks a person to write it).';
        else if (!report.proof.ok) doc.message = 'The proof failed: nothing written.';
        else if (options.confirmWrite === undefined)
          doc.message = 'Not written: no person can be asked in this session (no elicitation).';
        else if (await options.confirmWrite(writeQuestion(doc), ctx.signal)) {
          if (ctx.signal?.aborted === true) doc.message = 'Canceled: nothing written.';
          else {
            doc.proposal.written = await learned.write();
            doc.message = `Written: ${doc.proposal.written}`;
          }
        } else doc.message = 'Not written: the person did not say yes.';
      } finally {
        await learned.remove();
      }
      return doc;
    },
  });
}
