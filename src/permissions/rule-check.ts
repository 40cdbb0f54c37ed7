import { isCapsuleError } from '../errors.js';
import type { CommandAnalysis, CommandParser } from './command-parser.js';
import { commandPermissionKey } from './command-parser.js';
import { baseName, implicitRuns } from './command-semantics.js';
import { GlobCache, hasGlobMeta } from './glob.js';
import { grantCovers, RUN_COMMAND } from './keys.js';
import { allowRuleMatches, denyRuleMatches, parseRule, rulePatternProgram, type Rule } from './rules.js';
import type { PermissionRequest } from './types.js';
import { singleQuoted } from '../shell-quote.js';

/** A command that shows a rule does not mean what it says. */
export interface Counterexample {
  command: string;
  key: string;
  why: string;
}

export interface RuleFinding {
  kind: 'allow' | 'deny' | 'grant';
  text: string;
  origin: string;
  /** Candidates tried with the real parser. */
  tried: number;
  counterexamples: Counterexample[];
}

export interface CheckInput {
  allow: readonly Rule[];
  deny: readonly Rule[];
  /** `--grant` keys, canonical. */
  grants?: ReadonlyArray<{ key: string; origin: string }> | undefined;
  /** The folder commands run in (relative programs are keyed there). */
  cwd: string;
}

/** At most this many counterexamples are kept per rule (the first ones are enough to act on). */
const MAX_PER_RULE = 5;

/** The request the gate would judge for a command, facts included, as the engine builds it. */
function requestFor(parser: CommandParser, command: string, cwd: string): PermissionRequest | undefined {
  let analysis: CommandAnalysis;
  try {
    analysis = parser.analyze(command);
  } catch (err) {
    if (isCapsuleError(err)) return undefined;
    throw err;
  }
  const subject = analysis.normalized;
  const facts = parser.analyze(subject).facts;
  return {
    tool: RUN_COMMAND,
    kind: 'OTHER',
    key: commandPermissionKey(analysis, cwd),
    subject,
    sandboxed: false,
    parts: analysis.parts,
    commands: facts,
  };
}

/** What a command runs besides `named` (a program name), or undefined when it runs only that. */
function unnamedRun(request: PermissionRequest, named: string | undefined): string | undefined {
  const facts = request.commands;
  if (facts === undefined) return 'what it runs cannot be known';
  if (facts.unprovable.length > 0) return `what it runs cannot be known (${facts.unprovable[0]})`;
  if (named === undefined) {
    const first = facts.commands[0];
    return first === undefined ? undefined : `runs ${first.name}: the rule names no program`;
  }
  for (const c of facts.commands) if (c.name !== named) return `runs ${c.name}, which it does not name`;
  for (const c of facts.commands) {
    const implicit = implicitRuns(c.name, c.args);
    if (implicit !== undefined) return implicit;
  }
  return undefined;
}

/** Arguments that make a program run others, or hide a second command (the families of the attacks). */
const HOSTILE_TAILS = [
  '',
  'x',
  "-c alias.x='!touch M' x",
  '-C other status',
  '--git-dir=other/.git status',
  '--exec-path=. status',
  'log --output=M',
  'diff --ext-diff',
  "grep -O'touch M' x",
  'commit -m x',
  'push',
  'pull',
  'checkout x',
  'x; touch M',
  'x && touch M',
  'x | sh',
  'x $(touch M)',
  'x > M',
  'touch M',
  '-exec touch M \\;',
  "-c 'touch M'",
  "-e 'touch M'",
  "--to-command='touch M'",
  "-S 'touch M'",
  "-C 'touch M' x",
  "-v 'a[$(touch M)]' x",
  'x.sh',
  'install',
  'run build',
];

function allowCandidates(pattern: string | undefined, program: string | undefined): string[] {
  const out = new Set<string>();
  const heads = program === undefined ? ['rm', 'bash', 'git', 'curl'] : [program];
  for (const head of heads) for (const tail of HOSTILE_TAILS) out.add(tail === '' ? head : `${head} ${tail}`);
  if (pattern !== undefined && pattern.includes('*')) {
    // The rule's own words with each wildcard filled by a hostile tail.
    for (const tail of HOSTILE_TAILS) out.add(pattern.replace(/\*/g, tail).trim());
  }
  if (pattern !== undefined && !hasGlobMeta(pattern)) out.add(pattern);
  return [...out].filter((c) => c !== '');
}

/** The literal program a pattern names (escapes removed), or undefined when it names none. */
function namedProgram(pattern: string | undefined): string | undefined {
  if (pattern === undefined || pattern === '*') return undefined;
  const word = rulePatternProgram(pattern);
  if (hasGlobMeta(word.replace(/\\./g, ''))) return undefined;
  return word.replace(/\\(.)/g, '$1');
}

/** Ways to write the same command that a text match would miss (the deny-rule attack families). */
function denyRewrites(instance: string, program: string): string[] {
  const rest = instance.slice(program.length).trimStart();
  const tail = rest === '' ? '' : ` ${rest}`;
  const q = singleQuoted;
  const out = [
    `/bin/${instance}`,
    `/usr/bin/${instance}`,
    `\\${instance}`,
    `'${program}'${tail}`,
    program.length > 1 ? `"${program[0]}"${program.slice(1)}${tail}` : `"${program}"${tail}`,
    `command ${instance}`,
    `builtin command ${instance}`,
    `exec ${instance}`,
    `env ${instance}`,
    `env -i ${instance}`,
    `env FOO=1 ${instance}`,
    `env -S ${q(instance)}`,
    `nice ${instance}`,
    `nice -n 5 ${instance}`,
    `nohup ${instance}`,
    `time ${instance}`,
    `timeout 5 ${instance}`,
    `stdbuf -o0 ${instance}`,
    `setsid ${instance}`,
    `ionice -c 3 ${instance}`,
    `sudo ${instance}`,
    `sudo -u root ${instance}`,
    `doas ${instance}`,
    `busybox ${instance}`,
    `xargs ${program} <<< ${q(rest === '' ? 'x' : rest)}`,
    `echo ${q(rest === '' ? 'x' : rest)} | xargs ${program}`,
    `find . -exec ${instance} \\;`,
    `sh -c ${q(instance)}`,
    `bash -c ${q(instance)}`,
    `bash -c ${q(`bash -c ${q(instance)}`)}`,
    `eval ${q(instance)}`,
    `echo ${q(instance)} | sh`,
    `trap ${q(instance)} EXIT`,
    `true && ${instance}`,
    `true; ${instance}`,
    `(${instance})`,
    `{ ${instance}; }`,
    `f() { ${instance}; }; f`,
    `echo $(${instance})`,
    `x=${program}; $x${tail}`,
    `$(echo ${program})${tail}`,
    `printf -v 'a[$(${instance})]' x`,
    `git -c alias.x=${q(`!${instance}`)} x`,
  ];
  if (program === 'rm' && rest !== '' && !rest.startsWith('-')) out.push(`find ${rest} -delete`);
  if (program === 'git' && rest !== '') {
    out.push(`git -C .${tail}`, `git --git-dir=.git${tail}`, `git -c a.b=c${tail}`, `git --no-pager${tail}`);
    const [sub, ...more] = rest.split(' ');
    if (sub !== undefined && !sub.startsWith('-'))
      out.push(`git -c alias.zz=${sub} zz${more.length > 0 ? ` ${more.join(' ')}` : ''}`);
  }
  // Short-option clusters split and reordered (`-rf` → `-fr`, `-r -f`).
  const words = instance.split(' ');
  words.forEach((w, i) => {
    if (!/^-[A-Za-z]{2,}$/.test(w)) return;
    const letters = [...w.slice(1)];
    const swap = (replacement: string): string =>
      [...words.slice(0, i), replacement, ...words.slice(i + 1)].join(' ');
    out.push(swap(`-${[...letters].reverse().join('')}`), swap(letters.map((l) => `-${l}`).join(' ')));
  });
  return out;
}

/** A command a deny pattern is meant for: its wildcards filled with a plain word. */
function denyInstance(pattern: string): string {
  return pattern.replace(/ \*/g, ' x').replace(/\*/g, '').replace(/\\(.)/g, '$1').trim();
}

/**
 * Search for counterexamples with the real parser: commands an allow rule (or a `--grant`) admits that
 * run a program it does not name, and rewrites of a command a deny rule is written for that it misses.
 */
export function checkRules(parser: CommandParser, input: CheckInput): RuleFinding[] {
  const globs = new GlobCache();
  const findings: RuleFinding[] = [];
  const isCommandRule = (r: Rule): boolean => r.tool === RUN_COMMAND;
  for (const rule of input.allow.filter(isCommandRule)) {
    const named = namedProgram(rule.pattern);
    const program = named === undefined ? undefined : baseName(named);
    const finding: RuleFinding = {
      kind: 'allow',
      text: rule.text,
      origin: rule.origin,
      tried: 0,
      counterexamples: [],
    };
    for (const command of allowCandidates(rule.pattern, named)) {
      const request = requestFor(parser, command, input.cwd);
      if (request === undefined) continue;
      finding.tried++;
      if (!allowRuleMatches(rule, request, globs)) continue;
      const why = unnamedRun(request, program);
      if (why !== undefined && finding.counterexamples.length < MAX_PER_RULE)
        finding.counterexamples.push({ command, key: request.key.raw, why });
    }
    findings.push(finding);
  }
  for (const grant of input.grants ?? []) {
    if (!grant.key.startsWith(`${RUN_COMMAND}:`)) continue;
    const action = grant.key.slice(RUN_COMMAND.length + 1);
    const named = action === '*' || action.endsWith(':*') ? undefined : action;
    const finding: RuleFinding = {
      kind: 'grant',
      text: grant.key,
      origin: grant.origin,
      tried: 0,
      counterexamples: [],
    };
    for (const command of allowCandidates(undefined, named)) {
      const request = requestFor(parser, command, input.cwd);
      if (request === undefined) continue;
      finding.tried++;
      if (!grantCovers(grant.key, request.key)) continue;
      const why = unnamedRun(request, named === undefined ? undefined : baseName(named));
      if (why !== undefined && finding.counterexamples.length < MAX_PER_RULE)
        finding.counterexamples.push({ command, key: request.key.raw, why });
    }
    findings.push(finding);
  }
  for (const rule of input.deny.filter(isCommandRule)) {
    const finding: RuleFinding = {
      kind: 'deny',
      text: rule.text,
      origin: rule.origin,
      tried: 0,
      counterexamples: [],
    };
    const named = namedProgram(rule.pattern);
    if (rule.pattern !== undefined && named !== undefined) {
      const instance = denyInstance(rule.pattern);
      const base = requestFor(parser, instance, input.cwd);
      // Only rewrites of a command the rule really denies are counterexamples.
      if (base !== undefined && denyRuleMatches(rule, base, globs)) {
        for (const command of denyRewrites(instance, named)) {
          const request = requestFor(parser, command, input.cwd);
          if (request === undefined) continue;
          finding.tried++;
          if (!denyRuleMatches(rule, request, globs) && finding.counterexamples.length < MAX_PER_RULE)
            finding.counterexamples.push({
              command,
              key: request.key.raw,
              why: `runs ${instance} but the rule does not match it`,
            });
        }
      }
    }
    findings.push(finding);
  }
  return findings;
}

/** One Claude Code `permissions` rule and what capsule makes of it. */
export interface ForeignRule {
  kind: 'allow' | 'deny' | 'ask';
  text: string;
  /** capsule rules it maps to (empty: no capsule counterpart). */
  capsule: string[];
  /** How capsule keys a command the rule is written for (`run_command:git`, compound or not). */
  key?: { key: string; compound: boolean } | undefined;
  note: string;
}

/**
 * A Claude Code rule in capsule's terms. `Bash(prefix:*)` means the prefix followed by anything;
 * `Bash(text)` the exact command; other tools have no run_command counterpart.
 */
export function translateClaudeRule(
  parser: CommandParser,
  kind: ForeignRule['kind'],
  text: string,
  cwd: string,
): ForeignRule {
  const m = /^Bash(?:\(([\s\S]*)\))?$/.exec(text.trim());
  if (m === null) {
    const tool = /^([A-Za-z]+)/.exec(text)?.[1] ?? text;
    const map: Record<string, string> = { Edit: 'write_file', Write: 'write_file', MultiEdit: 'write_file' };
    const target = map[tool];
    return {
      kind,
      text,
      capsule: [],
      note:
        target === undefined
          ? `${tool} has no capsule counterpart: not judged`
          : `${tool} corresponds to ${target} (path globs differ: write the rule by hand)`,
    };
  }
  const body = m[1];
  if (body === undefined || body === '*' || body === ':*')
    return { kind, text, capsule: ['run_command'], note: 'every simple command (never a compound one)' };
  const prefix = body.endsWith(':*') ? body.slice(0, -2) : body;
  const capsule = body.endsWith(':*')
    ? [`run_command(${prefix})`, `run_command(${prefix} *)`]
    : [`run_command(${body})`];
  const sample = prefix.replace(/\*/g, 'x').trim();
  let key: ForeignRule['key'];
  let note: string;
  try {
    const analysis = parser.analyze(sample);
    const k = commandPermissionKey(analysis, cwd);
    key = { key: k.raw, compound: k.compound };
    if (kind === 'deny')
      note = `denies "${sample}" wherever it runs: behind wrappers, paths, quotes, pipelines and nested shells`;
    else if (kind === 'ask') note = `capsule asks for ${k.raw} unless a rule or grant covers it`;
    else
      note = k.compound
        ? `capsule keys "${sample}" as a compound command (${analysis.reasons.join('; ')}): only the exact string matches`
        : `capsule keys "${sample}" as ${k.raw}; the rule admits simple commands only, a compound one needs its own approval`;
  } catch (err) {
    if (!isCapsuleError(err)) throw err;
    note = `not a command capsule can key: ${err.message}`;
  }
  for (const r of capsule) parseRule(r, 'claude-settings');
  return { kind, text, capsule, key, note };
}
