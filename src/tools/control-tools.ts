import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { CapsuleError } from '../base/errors.js';
import { askNone, defineNoArgumentTool, defineTool, type AgentTool } from './define.js';

/** Default cap for sleep(seconds); a session may lower or raise it. */
export const DEFAULT_SLEEP_MAX_SECONDS = 300;

// Control tools change the session, not the world: Permission::None, they never reach the gate.

export function createEnterPlanModeTool(): AgentTool {
  return defineNoArgumentTool({
    name: 'enter_plan_mode',
    description:
      'Switch to plan mode: read-only tools keep working, every change is denied until exit_plan_mode is approved.',
    subject: 'plan',
    async execute(ctx) {
      const previous = ctx.control.mode;
      ctx.control.setMode('plan');
      return {
        mode: 'plan',
        previous,
        message: 'Plan mode is on. Explore with read-only tools, then call exit_plan_mode with your plan.',
      };
    },
  });
}

export function createExitPlanModeTool(): AgentTool {
  return defineTool({
    name: 'exit_plan_mode',
    description:
      'Present your plan to the human for approval. Approved: edit mode (file edits allowed). Rejected: stay in plan mode and refine.',
    kind: 'READ_ONLY',
    parameters: z.strictObject({
      plan: z.string().min(1).max(100_000).describe('The plan to approve, in Markdown.'),
    }),
    async permission() {
      return askNone('plan');
    },
    async execute(args, ctx) {
      // Leaving plan mode is the one way this tool changes the mode: from any other mode an
      // "approval" would be a way to reach edit mode without the person choosing it.
      if (ctx.control.mode !== 'plan') {
        throw new CapsuleError(
          'USAGE',
          `exit_plan_mode works only in plan mode; the mode is ${ctx.control.mode} and stays ${ctx.control.mode}.`,
          { hint: 'Call enter_plan_mode first, or carry on in the current mode.' },
        );
      }
      const verdict = await ctx.control.approvePlan(args.plan, ctx.signal);
      if (verdict.approved) {
        ctx.control.setMode('edit');
        return {
          approved: true,
          mode: 'edit',
          message: 'The plan was approved. Edit mode is on: implement it.',
        };
      }
      ctx.control.setMode('plan');
      return {
        approved: false,
        mode: 'plan',
        message: `The plan was not approved. Stay in plan mode, refine the plan${
          verdict.feedback ? ` (feedback: ${verdict.feedback})` : ''
        } and call exit_plan_mode again.`,
      };
    },
  });
}

export function createSleepTool(): AgentTool {
  return defineTool({
    name: 'sleep',
    description: `Wait a number of seconds (capped; default cap ${DEFAULT_SLEEP_MAX_SECONDS}). Negative values are rejected.`,
    kind: 'READ_ONLY',
    parameters: z.strictObject({
      seconds: z
        .number()
        .min(0, 'must not be negative')
        .max(86_400)
        .describe('Seconds to wait (0 or more; values above the cap wait only the cap).'),
    }),
    async permission(args) {
      return askNone(String(args.seconds));
    },
    async execute(args, ctx) {
      const seconds = Math.min(args.seconds, ctx.sleepMaxSeconds);
      try {
        await delay(seconds * 1000, undefined, { signal: ctx.signal });
      } catch {
        throw new CapsuleError('CANCELED', 'sleep was canceled.');
      }
      return { slept: seconds, capped: seconds < args.seconds };
    },
  });
}

export function createReloadTool(): AgentTool {
  return defineNoArgumentTool({
    name: 'reload',
    description:
      'Re-read the capability registry from disk. A changed policy (capsule.json rules, allowlist, profiles) is shown to the human with the difference and takes effect only if they confirm it.',
    subject: 'reload',
    async execute(ctx) {
      return ctx.control.reload(ctx.signal);
    },
  });
}
