import type { Command } from 'commander';
import { auditLogPath, verifyAuditLog } from '../../permissions/audit-log.js';
import { EXIT } from '../exit-codes.js';
import { action, json, write, type CliIO } from '../output.js';
import { openProject } from '../session.js';

export function registerAudit(program: Command, io: CliIO): void {
  const audit = program.command('audit').description('The hash-chained audit log of permission decisions.');
  audit
    .command('verify')
    .description(
      'Check the chain of .capsule/audit.jsonl: exit 0 when intact, 1 naming the first edited, deleted or moved line.',
    )
    .option('--file <path>', 'verify this log instead of the project one')
    .option('--json', 'print JSON: {file, ok, records, line?, problem?, lastHash?}')
    .action(
      action(io, async (opts: { file?: string; json?: boolean }) => {
        const { project } = await openProject(io);
        const file = opts.file ?? auditLogPath(project.root);
        const result = await verifyAuditLog(file);
        if (opts.json) {
          await write(io.stdout, json({ file, ...result }));
        } else if (result.ok) {
          await write(
            io.stdout,
            `${file}: intact, ${result.records} record(s); last hash ${result.lastHash}\n`,
          );
        } else {
          await write(io.stderr, `${file}: BROKEN at line ${result.line}: ${result.problem}\n`);
        }
        return result.ok ? EXIT.OK : EXIT.FAILURE;
      }),
    );
}
