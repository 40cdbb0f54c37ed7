import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalGrantKey, keyCommand } from '../../../../src/permissions/commands/permission.js';
import { createCommandParser, type CommandParser } from '../../../../src/permissions/commands/parser.js';
import { readFileSync } from 'node:fs';
import { argumentsMatter, keyingHazard } from '../../../../src/permissions/commands/keying.js';
import { canonicalOptions } from '../../../../src/permissions/commands/canonical-options.js';
import { HAZARD_PROGRAMS, programHazard } from '../../../../src/permissions/commands/hazards.js';
import { INERT_PROGRAMS, mayRunArguments } from '../../../../src/permissions/commands/inert-programs.js';
import { unwrap } from '../../../../src/permissions/commands/unwrap.js';
import { isCapsuleError } from '../../../../src/base/errors.js';

let parser: CommandParser;
beforeAll(async () => {
  parser = await createCommandParser();
});
afterAll(() => parser.close());

describe('builtins that evaluate code are keyed by the whole string', () => {
  it.each([
    "printf -v 'a[$(touch M)]' x",
    "test -v 'a[$(touch M)]'",
    "[ -v 'a[$(touch M)]' ]",
    "[[ -v 'a[$(touch M)]' ]]",
    "let 'a[$(touch M)]'",
    "read 'a[$(touch M)]'",
    "mapfile -C 'touch M' -c 1 a",
    "readarray -C 'touch M' a",
    "declare 'a[$(touch M)]=1'",
    "typeset 'a[$(touch M)]=1'",
    "local 'a[$(touch M)]=1'",
    "export 'a[$(touch M)]=1'",
    "unset 'a[$(touch M)]'",
    'jobs -x touch M',
    "compgen -C 'touch M' x",
    'compgen -F f x',
    "complete -C 'touch M' x",
    "trap 'touch M' EXIT",
    'eval touch M',
    'source ./x.sh',
    '. ./x.sh',
    'command -p touch M',
    'exec touch M',
    'hash -p /bin/rm ls',
    'ulimit -n 5',
    "wait -p 'a[$(touch M)]'",
    "getopts a 'a[$(touch M)]'",
    'fc -s',
    'bind -x \'"\\C-a": touch M\'',
    'alias ls=rm',
    'enable -n echo',
    'shopt -s expand_aliases',
  ])('%s', (command) => {
    const k = keyCommand(parser, command);
    expect(k.compound).toBe(true);
    expect(k.key).toBe(`run_command:${command}`);
  });

  it('plain printf and test stay keyed by their program', () => {
    expect(keyCommand(parser, 'printf %s x').key).toBe('run_command:printf');
    expect(keyCommand(parser, 'test -f x').key).toBe('run_command:test');
  });
});

describe('wrappers and options that run other programs make a command compound', () => {
  it.each([
    'env rm x',
    'env -S "rm x"',
    'nice rm x',
    'nohup rm x',
    'timeout 5 rm x',
    'xargs rm',
    'busybox rm x',
    'sudo rm x',
    'doas rm x',
    'stdbuf -o0 rm x',
    'setsid rm x',
    "sh -c 'rm x'",
    "bash -ec 'rm x'",
    'find . -exec rm {} ;',
    'find . -delete',
    "git -c alias.x='!touch M' x",
    'git -C other status',
    'git --git-dir=x status',
    'git --work-tree=x status',
    'git --exec-path=. status',
    'git --config-env=core.pager=X log',
    'git -p log',
    'git log --output=M',
    'git log --outp=M',
    'git diff --ext-diff',
    'git grep -Otouch x',
    'git rebase -x "touch M" HEAD',
    'git difftool',
    'git config core.pager x',
    'git somealias',
    "tar -xf x.tar --to-command='touch M'",
    "tar --use-compress-program='touch M' -xf x",
    'tar xIf prog x.tar',
    "rsync -e 'touch M' a b",
    "rsync -ae 'touch M' a b",
    "ssh -o ProxyCommand='touch M' h",
    'scp -S prog a b',
    'awk \'BEGIN { system("touch M") }\'',
    'awk \'{ print | "sh" }\'',
    "sed -n '1e touch M' f",
    "sed 's/x/touch M/e' f",
    "sed -n 'w out' f",
    "less '+!touch M' f",
    'man -P prog ls',
    "vim -c '!touch M'",
    'zip -TT prog a.zip f',
    "sed -n -e'1e touch M' f",
    "sed --expression='1e touch M' f",
    'fd -x touch',
    "rg --pre 'touch M' x",
    "gdb -batch -ex 'shell touch M'",
    'at now',
    'crontab jobs.txt',
  ])('%s', (command) => {
    expect(keyCommand(parser, command).compound).toBe(true);
  });

  it.each([
    ['git status', 'run_command:git'],
    ['git --no-pager log --oneline', 'run_command:git'],
    ['git --version', 'run_command:git'],
    ['git diff --no-ext-diff HEAD', 'run_command:git'],
    ['tar -xf x.tar', 'run_command:tar'],
    ['rsync -av a b', 'run_command:rsync'],
    ["awk '{ print $1 }' f", 'run_command:awk'],
    ["sed 's/a/b/g' f", 'run_command:sed'],
    ['find . -name x', 'run_command:find'],
    ['env', 'run_command:env'],
    ['bash x.sh', 'run_command:bash'],
  ])('%s stays simple: %s', (command, key) => {
    expect(keyCommand(parser, command)).toEqual({ tool: 'run_command', key, compound: false });
  });
});

describe('the semantics as pure functions', () => {
  it('unwrap lists every program a wrapper chain runs, quotes and paths resolved', () => {
    const u = unwrap('time', ['nice', '-n', '5', 'env', 'FOO=1', '/bin/rm', '-f', 'v']);
    expect(u.commands.map((c) => c.name)).toEqual(['time', 'nice', 'env', 'rm']);
    expect(u.commands.at(-1)?.args).toEqual(['-f', 'v']);
  });

  it('sh -c, eval and git aliases give shell code; a shell with no operand reads stdin', () => {
    expect(unwrap('sh', ['-c', 'rm v']).scripts).toEqual(['rm v']);
    expect(unwrap('eval', ['rm', 'v']).scripts).toEqual(['rm v']);
    expect(unwrap('git', ['-c', 'alias.x=!rm v', 'x']).scripts).toEqual(['rm v']);
    expect(unwrap('bash', []).unprovable.length).toBe(1);
  });

  it('a keying hazard names its reason', () => {
    expect(keyingHazard('printf', ['-v', 'x', 'y'])).toContain('evaluates');
    expect(keyingHazard('git', ['-c', 'a=b', 'status'])).toContain('-c');
    expect(keyingHazard('ls', ['-la'])).toBeUndefined();
  });

  it('keying reads the arguments of every program the hazard table knows', () => {
    for (const name of HAZARD_PROGRAMS) expect(argumentsMatter(name)).toBe(true);
    expect(argumentsMatter('/usr/bin/git')).toBe(true);
    expect(argumentsMatter('ls')).toBe(false);
  });

  it('a program outside HAZARD_PROGRAMS has no hazard for hostile arguments', () => {
    const hostile = ['-c', 'touch M', '-e', 'x', '--exec=touch M', '-x', 'system("x")', '1e touch M', '+!x'];
    for (const name of ['ls', 'cat', 'grep', 'make', 'cargo', 'curl', 'echo']) {
      expect(argumentsMatter(name)).toBe(false);
      expect(programHazard(name, hostile)).toBeUndefined();
    }
  });

  it('a program named like a property of every object (constructor, toString) is no wrapper', () => {
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      expect(unwrap(name, ['-x', 'rm', 'v']).commands.map((c) => c.name)).toEqual([name]);
      expect(argumentsMatter(name)).toBe(false);
      expect(mayRunArguments(name)).toBe(true);
    }
    expect(keyCommand(parser, 'toString -x rm v')).toEqual({
      tool: 'run_command',
      key: 'run_command:toString',
      compound: false,
    });
  });

  it('canonical options split and sort short clusters', () => {
    expect(canonicalOptions(['rm', '-rf', 'x'])).toBe('rm -f -r x');
    expect(canonicalOptions(['rm', '-r', '-f', 'x'])).toBe('rm -f -r x');
    expect(canonicalOptions(['rm', 'x'])).toBeUndefined();
  });

  it("rm's long options and -R are its letters; other programs' long options stay as written", () => {
    expect(canonicalOptions(['rm', '--recursive', '--force', 'x'])).toBe('rm -f -r x');
    expect(canonicalOptions(['rm', '-Rf', 'x'])).toBe('rm -f -r x');
    expect(canonicalOptions(['/bin/rm', '--force', '-R', 'x'])).toBe('/bin/rm -f -r x');
    expect(canonicalOptions(['cp', '--recursive', '-R', 'x'])).toBe('cp -R --recursive x');
  });
});

describe('programs capsule has no model of may run their arguments', () => {
  it('only programs that are neither modelled nor in the inert table', () => {
    for (const name of [
      'setpriv',
      'ssh-agent',
      'setarch',
      'linux64',
      'sg',
      'perf',
      'capsh',
      'with',
      'docker',
    ])
      expect(mayRunArguments(name), name).toBe(true);
    for (const name of [
      'ls',
      'echo',
      'grep',
      'cat',
      'rm',
      'git',
      'env',
      'sudo',
      'bash',
      'python3',
      'node',
      'make',
      'npm',
      'find',
      'tar',
      'sed',
      'awk',
      'xargs',
      'eval',
      'printf',
      'test',
    ])
      expect(mayRunArguments(name), name).toBe(false);
  });

  it('no inert program is one capsule models as running code, and each has its reason', () => {
    for (const [name, why] of Object.entries(INERT_PROGRAMS)) {
      expect(argumentsMatter(name) && name !== 'printf', name).toBe(false);
      expect(why.length, name).toBeGreaterThan(0);
    }
  });

  it('docs/permissions.md lists exactly the inert table, with the same reasons', () => {
    const doc = readFileSync('docs/permissions.md', 'utf8');
    const section = doc.slice(doc.indexOf('Programs known not to execute their arguments'));
    const rows = [
      ...section
        .slice(0, section.indexOf('\n\n', section.indexOf('| program')))
        .matchAll(/^\| `([^`]+)` +\| (.*?) +\|$/gm),
    ];
    expect(Object.fromEntries(rows.map((r) => [r[1], r[2]]))).toEqual(INERT_PROGRAMS);
  });

  it('a code option at the end of a cluster, or glued on, is code (script -qc, env -iS)', () => {
    expect(unwrap('script', ['-qc', 'rm v', '/dev/null']).scripts).toEqual(['rm v']);
    expect(unwrap('su', ['-lcrm v']).scripts).toEqual(['rm v']);
    expect(unwrap('env', ['-iS', 'rm v']).scripts).toEqual(['rm v']);
    expect(unwrap('env', ["-S'rm v'"]).scripts).toEqual(["'rm v'"]);
    // A letter that takes a value ends the cluster: flock -w takes `5c`, not a -c.
    expect(unwrap('flock', ['-w5c', 'lock', 'true']).scripts).toEqual([]);
  });
});

describe('grant keys are exact', () => {
  it.each(['run_command:ech*', 'run_command:?s', 'run_command:[a]s'])('%s is refused with USAGE', (grant) => {
    let code: string | undefined;
    try {
      canonicalGrantKey(parser, grant);
    } catch (err) {
      if (isCapsuleError(err)) code = err.code;
    }
    expect(code).toBe('USAGE');
  });

  it('a relative program in a grant is resolved at the given root', () => {
    expect(canonicalGrantKey(parser, 'run_command:./build.sh', '/p')).toBe('run_command:/p/build.sh');
    expect(canonicalGrantKey(parser, 'run_command:git', '/p')).toBe('run_command:git');
  });

  it('a line continuation inside a word (bash joins it: r\\⏎m is rm) is compound, verbatim', () => {
    expect(keyCommand(parser, 'r\\\nm v')).toEqual({
      tool: 'run_command',
      key: 'run_command:r\\\nm v',
      compound: true,
    });
    expect(keyCommand(parser, 'git \\\n  status').key).toBe('run_command:git');
  });

  it('a carriage return makes a command compound and is kept verbatim', () => {
    expect(keyCommand(parser, 'echo a\rb')).toEqual({
      tool: 'run_command',
      key: 'run_command:echo a\rb',
      compound: true,
    });
  });
});
