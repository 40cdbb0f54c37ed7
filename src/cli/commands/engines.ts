import type { Command } from 'commander';
import { EXIT } from '../exit-codes.js';
import { action, json, progressLine, write, type CliIO } from '../output.js';

interface EngineRow {
  name: string;
  type?: 'docker' | 'swarm' | undefined;
  host: string;
  healthy: boolean;
  error?: string | undefined;
  version?: string | undefined;
  runtimes?: string[] | undefined;
  /** The daemon measured: what the measurement is bound to (absent when it does not answer). */
  identity?: Record<string, unknown> | undefined;
  /** What a hardened call container measured on this engine (absent when it does not answer). */
  posture?: Record<string, unknown> | undefined;
  /** A swarm: each ready node as its own probe measured it. */
  nodes?: Array<Record<string, unknown>> | undefined;
  sandboxed?: boolean | undefined;
  missing?: string[] | undefined;
  measuredAt?: string | undefined;
}

/** `capsule engines`: the Docker engines docker capabilities may run on, each asked and measured now. */
export function registerEngines(program: Command, io: CliIO): void {
  program
    .command('engines')
    .description(
      'List the Docker engines docker capabilities run on (capsule.json "engines", $CAPSULE_ENGINES; none: the local or DOCKER_HOST engine),\n' +
        'each with its health, version, runtimes and the posture a probe measured inside a hardened call container.\n' +
        'Exit 0 when every listed engine answers, 69 when one does not.',
    )
    .option('--engine <names>', 'only these engines (comma list)')
    .option(
      '--json',
      'print JSON: [{name, type, host, healthy, error?, version, runtimes, identity, posture (docker), nodes (swarm), sandboxed, missing, measuredAt}]',
    )
    .action(
      action(io, async (opts: { engine?: string; json?: boolean }) => {
        const [
          { openProject, cliPolicySnapshots },
          { resolveEngines, selectEngines, ENGINE_ENV },
          engines,
          dockerode,
          { resolveStartingPolicy },
          { isNoEngine, noEngineLine },
        ] = await Promise.all([
          import('../session.js'),
          import('../../project/engines.js'),
          import('../../runtime/engines.js'),
          import('../../runners/docker/dockerode-engine.js'),
          import('../../permissions/policy-snapshot.js'),
          import('../../runners/docker/engine.js'),
        ]);
        const { project } = await openProject(io);
        // Only the engines a person confirmed (or their own CAPSULE_ENGINES): even asking an engine
        // for its version would reach whatever a repository's file names.
        const starting = await resolveStartingPolicy({
          projectRoot: project.root,
          file: project.file,
          config: project.config,
          store: cliPolicySnapshots(io),
          recordFirstUse: false,
        });
        if (starting.warning !== undefined) await write(io.stderr, `capsule: ${starting.warning}\n`);
        const selected = selectEngines(
          resolveEngines(starting.config.engines ?? {}, io.env),
          opts.engine ?? io.env[ENGINE_ENV],
        );
        const targets =
          selected.length > 0
            ? await Promise.all(
                selected.map(async (e) => ({
                  ...(await engines.connectEngine(e.name, e.config, project.root)),
                  host: e.config.type === 'swarm' ? e.config.manager : e.config.host,
                })),
              )
            : [
                {
                  name: 'default',
                  kind: 'docker' as const,
                  host: io.env['DOCKER_HOST'] ?? 'unix:///var/run/docker.sock',
                  engine: engines.connectDefaultEngine(io.env),
                },
              ];
        const rows: EngineRow[] = await Promise.all(
          targets.map(async (t): Promise<EngineRow> => {
            try {
              await t.engine.ping(5000);
              const info = await t.engine.info();
              // Measured as a call would be: bound to the daemon that answers (its canary checked on every
              // connection), the probe run through that binding (a swarm: one probe placed on each ready node).
              const pool = engines.enginePoolOf([t], {
                runner: { env: {}, onProgress: progressLine(io, 'engines', { json: opts.json }) },
              });
              try {
                const measured = await pool.measurement(t.name);
                const { canary: _canary, ...identity } = measured.identity ?? { canary: '' };
                return {
                  name: t.name,
                  type: t.kind === 'swarm' ? 'swarm' : 'docker',
                  host: t.host,
                  healthy: true,
                  version: info.serverVersion,
                  runtimes: info.runtimes,
                  identity: measured.identity === undefined ? undefined : identity,
                  posture: measured.posture === undefined ? undefined : { ...measured.posture },
                  nodes: measured.nodes?.map((n) => ({
                    id: n.id,
                    hostname: n.hostname,
                    version: n.version,
                    sandboxed: n.verdict.sandboxed,
                    missing: n.verdict.missing,
                    posture: n.posture,
                  })),
                  sandboxed: measured.verdict.sandboxed,
                  missing: measured.verdict.missing,
                  measuredAt: measured.measuredAt,
                };
              } finally {
                await pool.close();
              }
            } catch (err) {
              return { name: t.name, host: t.host, healthy: false, error: dockerode.engineMessage(err) };
            }
          }),
        );
        if (opts.json) {
          await write(io.stdout, json(rows));
        } else {
          const lines = rows.map((r) =>
            r.healthy
              ? `${r.name}  ${r.host}  docker ${r.version ?? '?'}  runtimes ${(r.runtimes ?? []).join(',')}  ${
                  r.sandboxed === true ? 'sandboxed' : `NOT sandboxed: ${(r.missing ?? []).join(', ')}`
                }`
              : isNoEngine(r.error)
                ? `${r.name}  ${noEngineLine(r.host)}`
                : `${r.name}  ${r.host}  does not answer: ${r.error ?? 'unknown error'}`,
          );
          await write(io.stdout, `${lines.join('\n')}\n`);
        }
        return rows.every((r) => r.healthy) ? EXIT.OK : EXIT.UNAVAILABLE;
      }),
    );
}
