import type { Readable, Writable } from 'node:stream';
import type { Command } from 'commander';
import type { PlanApproval } from '../../agent/agent-session.js';
import { EXIT } from '../exit-codes.js';
import { addGateFlags, type GateFlags } from '../flags.js';
import { action, write, type CliIO } from '../output.js';
import { VERSION } from '../version.js';

const noPromptPlanApproval: PlanApproval = () =>
  Promise.resolve({
    approved: false,
    feedback:
      'the server runs with --no-prompt, so no person is asked to approve plans; present the plan in your reply instead',
  });

export function registerMcp(program: Command, io: CliIO): void {
  addGateFlags(
    program
      .command('mcp')
      .description(
        'Serve capsule to an agent over MCP (stdio). Asks become elicitation requests to the client; see docs/mcp.md.',
      )
      .option(
        '--profile <name>',
        'agent profile: build (default), plan, explore, reviewer, subagent, or a project profile',
      ),
  ).action(
    action(io, async (opts: GateFlags & { profile?: string }) => {
      const [
        { StdioServerTransport },
        { openAgentSession },
        { createNonInteractivePrompter },
        { CapsuleMcpServer },
      ] = await Promise.all([
        import('@modelcontextprotocol/sdk/server/stdio.js'),
        import('../../agent/open-session.js'),
        import('../../permissions/prompter.js'),
        import('../../mcp/server.js'),
      ]);
      // A grant that can never match is refused before the server starts (exit 64), not at first use.
      const { canonicalGrants } = await import('../../runtime/runtime.js');
      const { createCommandParser } = await import('../../permissions/commands/parser.js');
      const { parseLimitedGrant } = await import('../../permissions/grant-lifetime.js');
      const limitedGrants = (opts.grantFor ?? []).map((g) => parseLimitedGrant(g));
      let checkParser: Awaited<ReturnType<typeof createCommandParser>> | undefined;
      try {
        await canonicalGrants(
          [...opts.grant, ...limitedGrants.map((g) => g.key)],
          async () => (checkParser ??= await createCommandParser()),
        );
      } finally {
        checkParser?.close();
      }
      const server = new CapsuleMcpServer({
        version: VERSION,
        openSession: (hooks) =>
          openAgentSession({
            cwd: io.cwd,
            env: io.env,
            profile: opts.profile,
            mode: opts.mode,
            grants: opts.grant,
            limitedGrants,
            // --no-prompt: the client is never asked: every Ask is a denial naming the key, a plan
            // stays unapproved and a changed policy is not adopted.
            prompter: opts.prompt ? hooks.prompter : createNonInteractivePrompter(),
            approvePlan: opts.prompt ? hooks.approvePlan : noPromptPlanApproval,
            confirmPolicy: opts.prompt ? hooks.confirmPolicy : undefined,
            // and learn_capability writes nothing.
            confirmWrite: opts.prompt ? hooks.confirmWrite : undefined,
            // stdout carries the protocol: everything else goes to stderr.
            logger: (m) => void write(io.stderr, `capsule: ${m}\n`),
            onRunnerProgress: (m) => void write(io.stderr, `capsule: ${m}\n`),
          }),
      });
      const stdin = io.stdin();
      await server.start(new StdioServerTransport(stdin as Readable, io.stdout as Writable));
      // The client ends stdin to stop the server (or signals it): then close runners and exit.
      let stop = (): void => undefined;
      const stopped = new Promise<void>((resolve) => (stop = resolve));
      stdin.once('end', stop);
      stdin.once('close', stop);
      io.signals.on('SIGTERM', stop);
      io.signals.on('SIGINT', stop);
      server.server.onclose = stop;
      await stopped;
      io.signals.removeListener('SIGTERM', stop);
      io.signals.removeListener('SIGINT', stop);
      await server.close();
      return EXIT.OK;
    }),
  );
}
