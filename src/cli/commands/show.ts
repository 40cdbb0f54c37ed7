import type { Command } from 'commander';
import { action, json, write, type CliIO } from '../output.js';
import { EXIT } from '../exit-codes.js';

export function registerShow(program: Command, io: CliIO): void {
  program
    .command('show')
    .description('Show one capability: manifest, resolved grants, content hash and isolation.')
    .argument('<name>', 'capability name')
    .option('--json', 'print JSON')
    .action(
      action(io, async (name: string, opts: { json?: boolean }) => {
        const [{ openProject }, { defaultIsolation }, { probeHostConfinement }, { describeGrant }] =
          await Promise.all([
            import('../session.js'),
            import('../../executor/isolation.js'),
            import('../../runners/host/confinement.js'),
            import('../../network/policy.js'),
          ]);
        const { registry } = await openProject(io);
        const cap = await registry.get(name);
        // Measured here, not assumed: the shell runner's confinement comes from a probe run.
        const confinement = cap.environment === 'shell' ? probeHostConfinement() : undefined;
        const isolation = defaultIsolation(cap, confinement);
        const unenforced =
          confinement === undefined
            ? []
            : [
                confinement.memoryLimit ? undefined : 'memory',
                confinement.pidsLimit ? undefined : 'pids',
              ].filter((x): x is string => x !== undefined);
        if (opts.json) {
          await write(
            io.stdout,
            json({
              name: cap.name,
              dir: cap.dir,
              contentHash: cap.contentHash,
              isolation,
              manifest: cap.manifest,
              fsGrants: cap.fsGrants,
            }),
          );
          return EXIT.OK;
        }
        const m = cap.manifest;
        const grants = [
          ...cap.fsGrants.map((g) => `fs ${g.mode} ${g.declared} (${g.hostPath})`),
          ...m.grants.network.map((g) => `network ${describeGrant(g)}`),
          ...m.grants.env.map((e) => `env ${e}`),
        ];
        const lines = [
          `${cap.name} — ${m.description}`,
          `environment: ${cap.environment}`,
          `entry:       ${m.interpreter ? `${m.interpreter} ` : ''}${m.entry}${m.args.length ? ` ${m.args.join(' ')}` : ''}`,
          `folder:      ${cap.dir}`,
          `hash:        ${cap.contentHash}`,
          `isolation:   ${isolation.summary}`,
          `limits:      timeout ${m.limits.timeoutMs} ms, memory ${m.limits.memoryMb} MiB, output ${m.limits.outputBytes} bytes, pids ${m.limits.pids}${cap.environment === 'wasm' && m.grants.fs.some((g) => g.mode === 'rw') ? `, writes ${m.limits.writeBytes} bytes` : ''}${m.grants.network.length > 0 ? `, network ${m.limits.networkRequests} requests / ${m.limits.networkBytes} bytes` : ''}${unenforced.length > 0 ? ` (${unenforced.join(' and ')} NOT enforced on this machine)` : ''}`,
          `grants:      ${grants.length ? grants.join('; ') : 'none (everything denied)'}`,
          `input:       ${JSON.stringify(m.inputSchema)}`,
          ...(m.outputSchema !== undefined ? [`output:      ${JSON.stringify(m.outputSchema)}`] : []),
          `permission:  run_capability:${cap.name}`,
        ];
        await write(io.stdout, `${lines.join('\n')}\n`);
        return EXIT.OK;
      }),
    );
}
