import { isCapsuleError } from '../base/errors.js';
import type { CommandAnalysis, CommandParser } from './commands/parser.js';
import { commandPermissionKey } from './commands/permission.js';
import { baseName } from './commands/words.js';
import { implicitRuns } from './commands/hidden-runs.js';
import { GlobCache, hasGlobMeta } from '../base/glob.js';
import { grantCovers, RUN_COMMAND } from './keys.js';
import { allowRuleMatches, judgeDenyRule, rulePatternProgram, type Rule } from './rules.js';
import type { PermissionRequest } from './types.js';
import { singleQuoted } from '../base/shell-quote.js';

/**
 * A command that shows a rule does not mean what it says. Every one is real: an allow counterexample
 * is admitted by the rule and runs what the project's files say (a hostile Makefile, package.json
 * script, git hook or script file makes it run anything); a deny counterexample runs the command the
 * rule is written for and the rule lets it run.
 */
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
  /**
   * Deny rules: rewrites capsule cannot prove clear of the rule, so it asks a person (under
   * --no-prompt: denies) rather than denying outright: `setpriv rm x`, `perf stat rm x` … Not holes.
   */
  asks: Counterexample[];
}

export interface RuleSetInput {
  allow: readonly Rule[];
  deny: readonly Rule[];
  /** `--grant` keys, canonical. */
  grants?: ReadonlyArray<{ key: string; origin: string }> | undefined;
  /** The folder commands run in (relative programs are keyed there). */
  cwd: string;
  /**
   * Is this program installed here? A rewrite through a wrapper that is not installed is not tried: it
   * could not run, so it would be no counterexample. Default: every program is.
   */
  installed?: ((program: string) => boolean) | undefined;
  /** Facts of this machine the rewrites need to run: `uname -m`, a group the user is in. */
  machine?: { arch?: string | undefined; group?: string | undefined } | undefined;
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

/**
 * What a command admitted under `named` runs that the rule does not name, for certain: another
 * program, or code from a file of the project (implicitRuns). undefined when nothing is certain.
 */
function unnamedRun(request: PermissionRequest, named: string | undefined): string | undefined {
  const facts = request.commands;
  if (facts === undefined || facts.unprovable.length > 0) return undefined;
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

/**
 * Arguments that make a program run others, per program: a family is tried only on the programs it
 * belongs to (git's global options mean nothing to make). Those that run code from the project's
 * files are counterexamples of a rule that admits them.
 */
const ALLOW_TAILS: ReadonlyArray<{ programs: RegExp; tails: readonly string[] }> = [
  {
    programs: /^git$/,
    tails: [
      "-c alias.x='!touch M' x",
      '-C other status',
      '--git-dir=other/.git status',
      '--exec-path=. status',
      'log --output=M',
      'diff --ext-diff',
      "grep -O'touch M' x",
      'commit --allow-empty -m x',
    ],
  },
  { programs: /^(make|gmake)$/, tails: ['', 'x', 'install'] },
  { programs: /^(npm|pnpm|yarn|bun)$/, tails: ['test', 'run build', "exec -c 'touch M'"] },
  { programs: /^(sh|bash|dash|zsh|ksh)$/, tails: ['x.sh', "-c 'touch M'"] },
  { programs: /^python[0-9.]*$/, tails: ['x.py', '-c "import os; os.system(\'touch M\')"'] },
  { programs: /^node$/, tails: ['x.js', "-e \"require('child_process').execSync('touch M')\""] },
  { programs: /^perl$/, tails: ['x.pl', '-e \'system("touch M")\''] },
  { programs: /^find$/, tails: ['. -maxdepth 0 -exec touch M \\;'] },
  { programs: /^(env|nice|nohup|timeout|xargs|busybox|setsid|stdbuf)$/, tails: ['touch M', "-S 'touch M'"] },
  { programs: /^(awk|gawk|mawk)$/, tails: ['\'BEGIN { system("touch M") }\''] },
  { programs: /^sed$/, tails: ["-n '1e touch M' x"] },
  { programs: /^tar$/, tails: ["-xf x.tar --to-command='touch M'"] },
  { programs: /^(printf|test)$/, tails: ["-v 'a[$(touch M)]' x"] },
  // Any program: a second command glued on, which the rule must not admit.
  { programs: /^/, tails: ['x; touch M', 'x && touch M', 'x | sh', 'x $(touch M)', 'x > M'] },
];

/** The programs a rule with no program (`run_command(*)`, a bare `run_command`) is tried with. */
const NAMELESS_HEADS = ['rm x', 'touch M'];

function allowCandidates(pattern: string | undefined, program: string | undefined): string[] {
  const out = new Set<string>();
  if (program === undefined) for (const head of NAMELESS_HEADS) out.add(head);
  else {
    out.add(program);
    for (const family of ALLOW_TAILS)
      if (family.programs.test(baseName(program)))
        for (const tail of family.tails) out.add(tail === '' ? program : `${program} ${tail}`);
  }
  if (pattern !== undefined && pattern.includes('*') && program !== undefined) {
    // The rule's own words with its wildcard filled by each tail that belongs to the program.
    for (const family of ALLOW_TAILS)
      if (family.programs.test(baseName(program)))
        for (const tail of family.tails) out.add(pattern.replace(/\*/g, tail).trim());
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

/** A rewrite, and the program it needs installed to run (a wrapper), if any. */
interface Rewrite {
  command: string;
  needs?: string;
}

/** Programs whose operands are files: `rm -- x` and `rm ./x` are the same command to them. */
const FILE_OPERANDS = /^(rm|rmdir|unlink|shred|chmod|chown|chgrp|truncate|touch|mkdir)$/;

/** Ways to write the same command that a text match would miss (the deny-rule attack families). */
function denyRewrites(instance: string, program: string, machine: RuleSetInput['machine']): Rewrite[] {
  const rest = instance.slice(program.length).trimStart();
  const tail = rest === '' ? '' : ` ${rest}`;
  const q = singleQuoted;
  const arch = machine?.arch ?? 'x86_64';
  const plain = [
    `/bin/${instance}`,
    `/usr/bin/${instance}`,
    `\\${instance}`,
    `'${program}'${tail}`,
    program.length > 1 ? `"${program[0]}"${program.slice(1)}${tail}` : `"${program}"${tail}`,
    `command ${instance}`,
    `builtin command ${instance}`,
    `exec ${instance}`,
    `xargs ${program} <<< ${q(rest === '' ? 'x' : rest)}`,
    `echo ${q(rest === '' ? 'x' : rest)} | xargs ${program}`,
    `find . -maxdepth 0 -exec ${instance} \\;`,
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
  // Programs that run their arguments, those capsule models and those it does not (it may not know a
  // wrapper, so it must not need to): each is tried only where it is installed.
  const wrapped: Array<[string, string]> = [
    ['env', `env ${instance}`],
    ['env', `env -i ${instance}`],
    ['env', `env FOO=1 ${instance}`],
    ['env', `env -S ${q(instance)}`],
    ['nice', `nice ${instance}`],
    ['nice', `nice -n 5 ${instance}`],
    ['nohup', `nohup ${instance}`],
    ['timeout', `timeout 5 ${instance}`],
    ['stdbuf', `stdbuf -o0 ${instance}`],
    ['setsid', `setsid -w ${instance}`],
    ['ionice', `ionice -c 3 ${instance}`],
    ['chrt', `chrt -o 0 ${instance}`],
    ['taskset', `taskset 1 ${instance}`],
    ['flock', `flock /tmp/capsule-rules-check.lock ${instance}`],
    ['flock', `flock /tmp/capsule-rules-check.lock -c ${q(instance)}`],
    ['script', `script -qc ${q(instance)} /dev/null`],
    ['strace', `strace -o /dev/null ${instance}`],
    ['ltrace', `ltrace -o /dev/null ${instance}`],
    ['valgrind', `valgrind -q ${instance}`],
    ['gdb', `gdb -batch -ex run --args ${instance}`],
    ['prlimit', `prlimit ${instance}`],
    ['unshare', `unshare ${instance}`],
    ['fakeroot', `fakeroot ${instance}`],
    ['unbuffer', `unbuffer ${instance}`],
    ['busybox', `busybox ${instance}`],
    ['sudo', `sudo ${instance}`],
    ['doas', `doas ${instance}`],
    ['setpriv', `setpriv ${instance}`],
    ['setpriv', `setpriv env ${instance}`],
    ['ssh-agent', `ssh-agent ${instance}`],
    ['setarch', `setarch ${arch} ${instance}`],
    ['linux64', `linux64 ${instance}`],
    ['linux32', `linux32 ${instance}`],
    ['perf', `perf stat -o /dev/null ${instance}`],
    ['capsh', `capsh -- -c ${q(instance)}`],
    ['choom', `choom -n 0 -- ${instance}`],
    ['dpkg-architecture', `dpkg-architecture -c ${instance}`],
    ['dbus-run-session', `dbus-run-session -- ${instance}`],
    ['aa-exec', `aa-exec -- ${instance}`],
    ['awk', `awk ${q(`BEGIN { system(${JSON.stringify(instance)}) }`)}`],
  ];
  if (machine?.group !== undefined) wrapped.push(['sg', `sg ${machine.group} -c ${q(instance)}`]);
  const out: Rewrite[] = [
    ...wrapped.map(([needs, command]) => ({ needs, command })),
    ...plain.map((command) => ({ command })),
  ];
  if (program === 'rm' && rest !== '' && !rest.startsWith('-'))
    out.push({ command: `find ${rest} -maxdepth 0 -delete` });
  if (program === 'git' && rest !== '') {
    for (const c of [
      `git -C .${tail}`,
      `git --git-dir=.git${tail}`,
      `git -c a.b=c${tail}`,
      `git --no-pager${tail}`,
    ])
      out.push({ command: c });
    const [sub, ...more] = rest.split(' ');
    if (sub !== undefined && !sub.startsWith('-'))
      out.push({ command: `git -c alias.zz=${sub} zz${more.length > 0 ? ` ${more.join(' ')}` : ''}` });
  }
  const words = instance.split(' ');
  // Short-option clusters split and reordered (`-rf` → `-fr`, `-r -f`).
  words.forEach((w, i) => {
    if (!/^-[A-Za-z]{2,}$/.test(w)) return;
    const letters = [...w.slice(1)];
    const swap = (replacement: string): string =>
      [...words.slice(0, i), replacement, ...words.slice(i + 1)].join(' ');
    out.push({ command: swap(`-${[...letters].reverse().join('')}`) });
    out.push({ command: swap(letters.map((l) => `-${l}`).join(' ')) });
  });
  // A file operand spelled another way, or after `--`; an option that changes nothing it names.
  if (FILE_OPERANDS.test(program)) {
    const last = words[words.length - 1] as string;
    if (words.length > 1 && /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/.test(last)) {
      const before = words.slice(0, -1).join(' ');
      out.push({ command: `${before} ./${last}` }, { command: `${before} -- ${last}` });
      if (program === 'rm')
        out.push({ command: `${program} -f${tail}` }, { command: `${program} -v${tail}` });
    }
    if (program === 'rm' && /(^| )-[a-z]*[rR]/.test(rest))
      out.push({
        command: instance.replace(
          / -([a-zA-Z]+)/,
          (_, l: string) =>
            ` ${[...l].map((c) => (c === 'r' || c === 'R' ? '--recursive' : c === 'f' ? '--force' : `-${c}`)).join(' ')}`,
        ),
      });
  }
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
export function findCounterexamples(parser: CommandParser, input: RuleSetInput): RuleFinding[] {
  const globs = new GlobCache();
  const findings: RuleFinding[] = [];
  const installed = input.installed ?? (() => true);
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
      asks: [],
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
      asks: [],
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
      asks: [],
    };
    const named = namedProgram(rule.pattern);
    if (rule.pattern !== undefined && named !== undefined) {
      const instance = denyInstance(rule.pattern);
      const base = requestFor(parser, instance, input.cwd);
      // Only rewrites of a command the rule really denies are counterexamples.
      if (base !== undefined && judgeDenyRule(rule, base, globs).match === 'yes') {
        for (const rewrite of denyRewrites(instance, named, input.machine)) {
          if (rewrite.needs !== undefined && !installed(rewrite.needs)) continue;
          const request = requestFor(parser, rewrite.command, input.cwd);
          if (request === undefined) continue;
          finding.tried++;
          const judged = judgeDenyRule(rule, request, globs);
          if (judged.match === 'maybe')
            finding.asks.push({ command: rewrite.command, key: request.key.raw, why: judged.why });
          else if (judged.match === 'no' && finding.counterexamples.length < MAX_PER_RULE)
            finding.counterexamples.push({
              command: rewrite.command,
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

// Claude Code rules in capsule terms live with the rest of the Claude settings mapping.
export { translateClaudeRule, type ForeignRule } from './claude-settings.js';
