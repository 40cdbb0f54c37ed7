import { realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { CapsuleError } from '../../base/errors.js';
import type { AuditHeadRef } from '../../permissions/audit/head.js';
import type { ForeignSegment } from '../../permissions/audit/chain.js';
import { EXIT } from '../exit-codes.js';
import { action, json, write, type CliIO } from '../output.js';

async function realpathOr(p: string): Promise<string> {
  // The head's folder may not exist yet: judge its nearest existing ancestor.
  for (let dir = path.resolve(p); ; dir = path.dirname(dir)) {
    try {
      return path.join(await realpath(dir), path.relative(dir, path.resolve(p)));
    } catch {
      if (path.dirname(dir) === dir) return path.resolve(p);
    }
  }
}

/** The project's log and its head; a `--file` elsewhere has no head (only its chain is checked). */
async function logAndHead(
  io: CliIO,
  file?: string,
): Promise<{ file: string; head?: AuditHeadRef | undefined }> {
  const [{ cliStateDir, cliStateKey, openProject }, { auditHeadPath, auditLogPath }, { isInside }] =
    await Promise.all([
      import('../session.js'),
      import('../../project/audit-paths.js'),
      import('../../manifest/paths.js'),
    ]);
  const { project } = await openProject(io);
  const projectLog = auditLogPath(project.root);
  const chosen = file !== undefined ? path.resolve(io.cwd, file) : projectLog;
  // A log named on the command line must be there: a missing one is a mistake, not an empty, intact chain.
  if (file !== undefined && (await stat(chosen).catch(() => undefined))?.isFile() !== true) {
    throw new CapsuleError('NOT_FOUND', `--file ${chosen} is not a file.`, {
      file: chosen,
      field: '--file',
      hint: 'Give the path of an audit log (.capsule/audit.jsonl).',
    });
  }
  const headFile = chosen === projectLog ? await auditHeadPath(cliStateDir(io), project.root) : undefined;
  if (
    headFile !== undefined &&
    isInside(await realpathOr(project.root), await realpathOr(path.dirname(headFile)))
  ) {
    await write(
      io.stderr,
      `capsule: warning: the audit head ${headFile} lies inside the project ${project.root}: a grant there can reach it (set XDG_STATE_HOME outside the project).\n`,
    );
  }
  return {
    file: chosen,
    head: headFile !== undefined ? { file: headFile, key: cliStateKey(io) } : undefined,
  };
}

/** Records other state folders wrote, in plain words: theirs to vouch for, not tampering. */
function foreignText(foreign: readonly ForeignSegment[], writer: string | undefined): string {
  if (foreign.length === 0) return '';
  const lines = foreign.map((f) => {
    const who = f.writer !== null ? `writer ${f.writer}` : 'a writer that names none (an earlier capsule)';
    const range = f.from === f.to ? `record ${f.from}` : `records ${f.from}-${f.to}`;
    const covered = f.afterHead
      ? "after this folder's last record: only the folder that wrote them can tell a cut or rewrite of them"
      : "chained under this folder's own later records, so covered by its head";
    return `  ${range}: ${who}; ${covered}\n`;
  });
  return (
    `records written from other state folders (another user, sudo, a container, another XDG_STATE_HOME; this folder is writer ${writer ?? '?'}) — recorded, not tampering:\n` +
    lines.join('')
  );
}

export function registerAudit(program: Command, io: CliIO): void {
  const audit = program.command('audit').description('The hash-chained audit log of permission decisions.');
  audit
    .command('verify')
    .description(
      'Check .capsule/audit.jsonl against its chain and its head (kept in the per-user state directory): ' +
        'exit 0 when intact, 1 naming the first problem (an edited, moved, non-canonical or torn line; a cut, emptied, deleted or rewritten log). ' +
        'Records other state folders wrote (another user, sudo, a container) are listed, not counted as tampering.',
    )
    .option(
      '--file <path>',
      'verify this log instead of the project one (no head: only its chain is checked)',
    )
    .option(
      '--json',
      'print JSON: {file, head, ok, records, anchored?, anchoredFrom?, lastHash?, writer?, foreign?, line?, kind?, problem?}',
    )
    .action(
      action(io, async (opts: { file?: string; json?: boolean }) => {
        const { file, head } = await logAndHead(io, opts.file);
        const headFile = head?.file;
        const { verifyAuditLog } = await import('../../permissions/audit/verify.js');
        const result = await verifyAuditLog(file, { head });
        if (opts.json) {
          await write(io.stdout, json({ file, head: headFile ?? null, ...result }));
        } else if (result.ok) {
          let anchor = result.anchored
            ? `matches its head ${headFile ?? ''}`
            : 'no head: only the chain was checked (a cut tail cannot be seen)';
          if (result.anchoredFrom > 0)
            anchor += `; records 0-${result.anchoredFrom - 1} were written before the log had a head (not anchored)`;
          await write(
            io.stdout,
            `${file}: intact, ${result.records} record(s); last hash ${result.lastHash}; ${anchor}\n${foreignText(result.foreign, result.writer)}`,
          );
        } else {
          const next =
            '\ncapsule: nothing more is recorded (or run) on this log until a person chooses how to go on: ' +
            'keep a copy of it, then `capsule audit reset` moves it aside (never deleted) and starts a new chain that says so';
          await write(io.stderr, `${file}: BROKEN (${result.kind}): ${result.problem}${next}\n`);
        }
        return result.ok ? EXIT.OK : EXIT.FAILURE;
      }),
    );
  audit
    .command('reset')
    .description(
      'Start a new chain: the current log is moved aside (never deleted) and the head is replaced. ' +
        'For a person, after `audit verify` reported a broken log and it was looked at.',
    )
    .option('--json', 'print JSON: {file, movedTo}')
    .action(
      action(io, async (opts: { json?: boolean }) => {
        const { file, head } = await logAndHead(io);
        const [{ verifyAuditLog }, { openAuditLogAt }] = await Promise.all([
          import('../../permissions/audit/verify.js'),
          import('../../runtime/audit.js'),
        ]);
        const log = openAuditLogAt(file, head);
        const before = await verifyAuditLog(file, { head });
        const why = before.ok ? 'the log verified' : `verify said: ${before.problem}`;
        const { movedTo } = await log.reset(`capsule audit reset; ${why}`);
        await write(
          io.stdout,
          opts.json === true
            ? json({ file, movedTo: movedTo ?? null })
            : `${file}: new chain started${movedTo !== undefined ? `; the previous log is ${movedTo}` : ''}\n`,
        );
        return EXIT.OK;
      }),
    );
}
