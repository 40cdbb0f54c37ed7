// `capsule rules check`'s work, loaded only when the command runs (see rules.ts).
import { accessSync, constants, readFileSync } from 'node:fs';
import { machine } from 'node:os';
import path from 'node:path';
import { ProfileCatalog } from '../../agent/profile.js';
import { loadProjectConfig, PROJECT_CONFIG_FILE } from '../../project/project-config.js';
import { CapsuleError } from '../../base/errors.js';
import { canonicalGrantKey } from '../../permissions/commands/permission.js';
import { createCommandParser } from '../../permissions/commands/parser.js';
import {
  readClaudeSettings,
  translateClaudeRule,
  type ForeignRule,
} from '../../permissions/claude-settings.js';
import { findCounterexamples, type RuleFinding } from '../../permissions/rule-counterexamples.js';
import { parseRule, type Rule } from '../../permissions/rules.js';
import { EXIT } from '../exit-codes.js';
import { json, write, type CliIO } from '../output.js';

export interface RulesCheckOptions {
  json?: boolean;
  profile?: string;
  grant: string[];
  claudeSettings?: string;
}

function render(findings: readonly RuleFinding[], foreign: readonly ForeignRule[]): string {
  let out = '';
  for (const f of findings) {
    const mark = f.counterexamples.length === 0 ? 'ok ' : 'BAD';
    out += `${mark} ${f.kind} ${f.text}  (${f.origin}; ${f.tried} candidates)\n`;
    for (const c of f.counterexamples) {
      const verb = f.kind === 'deny' ? 'misses' : 'admits';
      out += `      ${verb} ${JSON.stringify(c.command)}: ${c.why}\n`;
    }
    if (f.asks.length > 0) {
      const shown = f.asks.slice(0, 6).map((c) => JSON.stringify(c.command));
      const more = f.asks.length > shown.length ? ` and ${f.asks.length - shown.length} more` : '';
      out += `      asks a person for ${f.asks.length} rewrite(s) it cannot prove clear (--no-prompt denies them): ${shown.join(', ')}${more}\n`;
    }
  }
  if (foreign.length > 0) {
    out += '\nClaude Code rules in capsule terms:\n';
    for (const r of foreign) {
      const as = r.capsule.length > 0 ? r.capsule.join(', ') : '(none)';
      out += `  ${r.kind} ${r.text} → ${as}\n      ${r.note}\n`;
    }
  }
  const bad = findings.reduce((n, f) => n + f.counterexamples.length, 0);
  out += `\n${bad} counterexample(s) in ${findings.filter((f) => f.counterexamples.length > 0).length} of ${findings.length} run_command rule(s).\n`;
  return out;
}

/** Is a program on PATH (a rewrite through a wrapper that is not installed could not run)? */
function onPath(searchPath: string): (program: string) => boolean {
  const dirs = searchPath.split(path.delimiter).filter((d) => d !== '');
  const seen = new Map<string, boolean>();
  return (program) => {
    let found = seen.get(program);
    if (found === undefined) {
      found = dirs.some((d) => {
        try {
          accessSync(path.join(d, program), constants.X_OK);
          return true;
        } catch {
          return false;
        }
      });
      seen.set(program, found);
    }
    return found;
  };
}

/** The name of this process's group (`sg GROUP` needs no password for it), if /etc/group says. */
function primaryGroup(): string | undefined {
  const gid = process.getgid?.();
  if (gid === undefined) return undefined;
  try {
    for (const line of readFileSync('/etc/group', 'utf8').split('\n')) {
      const [name, , id] = line.split(':');
      if (id === String(gid) && name !== undefined && /^[a-z_][a-z0-9_-]*$/.test(name)) return name;
    }
  } catch {
    // no /etc/group: the sg rewrite is not tried
  }
  return undefined;
}

/** Search every run_command rule in effect for counterexamples; exit 1 when one is found. */
export async function rulesCheck(io: CliIO, opts: RulesCheckOptions): Promise<number> {
  const project = await loadProjectConfig(io.cwd);
  const parser = await createCommandParser();
  try {
    const allow: Rule[] = [];
    const deny: Rule[] = [];
    const add = (origin: string, a: readonly string[] = [], d: readonly string[] = []): void => {
      for (const r of a) allow.push(parseRule(r, origin, 'persistent', 'allow'));
      for (const r of d) deny.push(parseRule(r, origin, 'persistent', 'deny'));
    };
    add(PROJECT_CONFIG_FILE, project.config.permissions.allow, project.config.permissions.deny);
    const catalog = await ProfileCatalog.load({ projectRoot: project.root });
    for (const name of opts.profile !== undefined ? [opts.profile] : catalog.names()) {
      const profile = catalog.get(name);
      add(`profile:${name} (${profile.source})`, profile.allow, profile.deny);
    }
    const grants = opts.grant.map((g) => ({
      key: canonicalGrantKey(parser, g, project.root),
      origin: '--grant',
    }));
    const foreign: ForeignRule[] = [];
    let neverMatching = 0;
    if (opts.claudeSettings !== undefined) {
      const settings = await readClaudeSettings(opts.claudeSettings);
      const origin = `claude:${opts.claudeSettings}`;
      for (const kind of ['allow', 'deny', 'ask'] as const) {
        for (const text of settings.permissions[kind]) {
          const r = translateClaudeRule(parser, kind, text, project.root);
          foreign.push(r);
          // An ask rule only asks: nothing to search for.
          try {
            if (kind === 'allow') add(origin, r.capsule);
            if (kind === 'deny') add(origin, [], r.capsule);
          } catch (err) {
            // A mapped rule that could never match is reported with the entry, not searched.
            if (!(err instanceof CapsuleError) || err.code !== 'CONFIG_INVALID') throw err;
            r.note = `${r.note}; in capsule it can never match: ${err.message}`;
            neverMatching++;
          }
        }
      }
    }
    const findings = findCounterexamples(parser, {
      allow,
      deny,
      grants,
      cwd: project.root,
      installed: onPath(io.env.PATH ?? ''),
      machine: { arch: machine(), group: primaryGroup() },
    });
    const counterexamples = findings.reduce((n, f) => n + f.counterexamples.length, 0);
    await write(
      io.stdout,
      opts.json === true ? json({ findings, claude: foreign, counterexamples }) : render(findings, foreign),
    );
    if (neverMatching > 0)
      await write(
        io.stderr,
        `capsule: ${neverMatching} Claude Code rule(s) map to capsule rules that can never match (see the notes above).\n`,
      );
    return counterexamples > 0 || neverMatching > 0 ? EXIT.FAILURE : EXIT.OK;
  } finally {
    parser.close();
  }
}
