import { z } from 'zod';
import { ENVIRONMENTS } from '../project/environments.js';
import { grantsSchema } from '../manifest/schema.js';

/*
 * The shape of a learn result as `capsule learn --json` prints it and the learn_capability tool returns
 * it (its outputSchema): the proposal with what was written, what was seen, what is outside the project,
 * and the proof. Output only: nothing reads it back.
 */

const environment = z.enum(ENVIRONMENTS);
const op = z.enum(['read', 'list', 'write', 'create', 'rename', 'remove', 'exec', 'connect', 'http']);
const outcome = z
  .enum(['ok', 'failed', 'refused'])
  .describe('ok: it happened; failed: it failed by itself (not there); refused: the run refused it.');

export const learnResultSchema = z
  .object({
    proposal: z.object({
      capability: z.string().describe('The capability learned from.'),
      target: z
        .object({
          name: z.string().describe('What a write changes: this capability, or NAME-docker beside it.'),
          environment,
          image: z.string().optional(),
        })
        .describe('Where the proposed grants were proved, and what --write / write would write.'),
      grants: grantsSchema.describe("The proposed grants, in the manifest's own shape."),
      current: grantsSchema.describe("The manifest's grants today."),
      unobserved: z
        .array(z.string())
        .describe('What the runners could not observe here: the proposal does not guess it.'),
      ceiling: z
        .object({
          sandboxed: z.boolean(),
          highest: z.enum(['AlwaysThisProject', 'AlwaysThisSession']),
          why: z.string(),
        })
        .optional()
        .describe(
          'The target with exactly these grants, judged as at run time: sandboxed (may be allowed for the project) or not (a session grant at most), and why (a rw grant writes to the host).',
        ),
      written: z
        .string()
        .nullable()
        .describe('The manifest written (after a person said yes), or null: nothing was written.'),
    }),
    observed: z
      .array(
        z.object({
          op,
          path: z.string().optional().describe('Relative to the project root.'),
          host: z.string().optional(),
          port: z.number().optional(),
          method: z.string().optional(),
          outcome,
          via: z.string().describe('Who saw it: tracer, egress, wasm-host, …'),
          verdict: z
            .enum([
              'proposed',
              'own-files',
              'capsule-state',
              'other-capability',
              'not-found',
              'not-grantable',
              'name-lookup',
            ])
            .describe('Why it is, or is not, in the proposal.'),
          note: z.string().optional(),
        }),
      )
      .describe('What the learning runs did inside the project and on the network.'),
    outside: z
      .array(z.object({ op, path: z.string(), outcome, what: z.string() }))
      .describe('What they reached outside the project: reported with what it is, never proposed.'),
    proof: z.object({
      ok: z.boolean().describe('Every re-run with exactly the proposed grants agreed, every case passed.'),
      environment,
      runs: z.array(
        z.object({
          input: z.string(),
          equal: z.boolean(),
          exitCode: z.number().nullable(),
          casePassed: z.boolean().optional(),
          caseMessage: z.string().optional(),
          stderr: z.string().optional(),
        }),
      ),
      minimality: z
        .array(z.object({ grant: z.string(), unneeded: z.boolean() }))
        .describe('Each proposed grant dropped in turn; unneeded: dropping it changed no output.'),
      minimalityNote: z.string().optional(),
      failure: z.string().optional(),
      reference: z.string().optional(),
    }),
    message: z.string().optional().describe('What happened to a write that was asked for, in words.'),
    warnings: z.array(z.string()).optional().describe("capsule's own warnings (a protected file changed)."),
  })
  .describe('A learned grant proposal, its proof, and whether it was written.');

export type LearnResultDocument = z.infer<typeof learnResultSchema>;
