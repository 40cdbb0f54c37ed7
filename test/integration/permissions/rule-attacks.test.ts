import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject } from '../../helpers/capability.js';

/** A temp project with a victim file `v` and the given capsule.json permissions. */
async function project(permissions: { allow?: string[]; deny?: string[] }): Promise<string> {
  const { root } = await tempProject('capsule-rules-');
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1, permissions }));
  await writeFile(path.join(root, 'v'), 'victim');
  return root;
}

/** `capsule exec` for real: the command runs with bash in the project root if the gate allows it. */
function exec(root: string, command: string, flags: string[]): ReturnType<typeof cli> {
  return cli(['exec', ...flags, '--', command], { cwd: root });
}

describe('deny run_command(rm *) holds against rewrites of rm (bypass mode: only the deny rule stands in the way)', () => {
  const rewrites = [
    '/bin/rm v',
    'command rm v',
    'builtin command rm v',
    '\\rm v',
    "'rm' v",
    '"r"m v',
    'r\\m v',
    "$'\\x72m' v",
    'env rm v',
    'env -i rm v',
    'env FOO=1 rm v',
    'env -u HOME -- rm v',
    "env -S 'rm v'",
    'nice rm v',
    'nice -n 5 rm v',
    'nohup rm v',
    'time rm v',
    'time -p rm v',
    'timeout 5 rm v',
    'stdbuf -o0 rm v',
    'setsid -w rm v',
    'exec rm v',
    'exec -a x rm v',
    'command -p rm v',
    'xargs rm <<< v',
    'echo v | xargs rm',
    'echo v | xargs -n 1 rm',
    'busybox rm v',
    'find . -name v -delete',
    'find . -name v -exec rm {} \\;',
    'find . -name v -exec /bin/rm {} +',
    'x=rm; $x v',
    '$(echo rm) v',
    '`echo rm` v',
    "sh -c 'rm v'",
    "bash -c 'rm v'",
    "bash -ec 'rm v'",
    'bash -c \'bash -c "rm v"\'',
    "eval 'rm v'",
    'echo rm v | sh',
    'bash <<< "rm v"',
    'true | rm v',
    'true && rm v',
    'false || rm v',
    'echo $(rm v)',
    'echo "$(rm v)"',
    '(rm v)',
    '{ rm v; }',
    'f() { rm v; }; f',
    'for i in 1; do rm v; done',
    'if true; then rm v; fi',
    "printf -v 'a[$(rm v)]' x",
    "x='a[$(rm v)]'; echo $((x))",
    "trap 'rm v' EXIT",
    "git -c alias.x='!rm v' x",
    "git -c core.fsmonitor='rm v' status",
    "r''m v",
    '{rm,v}',
    'rm${IFS}v',
    'env -iu HOME rm v',
    "trap -- 'rm v' EXIT",
    'coproc rm v',
    'shopt -s expand_aliases\nalias r=rm\nr v',
    'hash -p /bin/rm ls; ls v',
    'cp /bin/rm ./ls && PATH=.:$PATH ls v',
    'cp /bin/rm ls; export PATH=.; ls v',
    'cp /bin/rm ls; printf -v PATH %s .; ls v',
    "source /dev/stdin <<< 'rm v'",
    "bash /dev/stdin <<< 'rm v'",
    "bash <(echo 'rm v')",
    'awk \'BEGIN { system("rm v") }\'',
    'python3 -c \'import os; os.remove("v")\'',
    'perl -e \'unlink "v"\'',
    "mapfile -C 'rm v' -c 1 a <<< x",
    "sed -n -e'1e rm v' v",
    "sed -n --expression='1e rm v' v",
    "at now <<< 'rm v'",
    "gdb -batch -ex 'shell rm v'",
    "expect -c 'exec rm v'",
    'cat <<EOF\n$(rm v)\nEOF',
    'for ((i=0; i<1; i++)); do rm v; done',
    'case x in x) rm v;; esac',
    'while rm v; do break; done',
    '! rm v',
    '[[ $(rm v) ]]',
    'time (rm v)',
    '"$(command -v rm)" v',
    '/usr/bin/env rm v',
    '/???/r? v',
    '\\/bin\\/rm v',
    'r\\\nm v',
    'exec 3< <(rm v)',
  ];
  it.each(rewrites)('%s', async (command) => {
    const root = await project({ deny: ['run_command(rm *)'] });
    const r = await exec(root, command, ['--mode', 'bypass', '--no-prompt']);
    expect(existsSync(path.join(root, 'v')), r.stderr).toBe(true);
    expect(r.code).toBe(77);
  });

  it('commands that do not run rm still run in bypass mode', async () => {
    const root = await project({ deny: ['run_command(rm *)'] });
    const r = await exec(root, 'echo rm v > out.txt', ['--mode', 'bypass', '--no-prompt']);
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(path.join(root, 'out.txt'))).toBe(true);
  });
});

describe('deny run_command(git push*) holds against git options and aliases (a local bare remote)', () => {
  async function repo(): Promise<{ root: string; pushed: () => Promise<boolean> }> {
    const root = await project({ deny: ['run_command(git push*)'] });
    const remote = path.join(root, '..', `${path.basename(root)}-remote.git`);
    const git = (args: string[], cwd = root) => execa('git', args, { cwd });
    await git(['init', '--bare', '-q', remote], root);
    await git(['init', '-q']);
    await git(['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '--allow-empty', '-m', 'x']);
    await git(['remote', 'add', 'origin', remote]);
    const pushed = async (): Promise<boolean> =>
      (
        await execa('git', ['--git-dir', remote, 'rev-parse', '--verify', '-q', 'refs/heads/b'], {
          reject: false,
        })
      ).exitCode === 0;
    return { root, pushed };
  }

  it.each([
    'git -C . push origin HEAD:refs/heads/b',
    'git --git-dir=.git push origin HEAD:refs/heads/b',
    'git --git-dir .git --work-tree . push origin HEAD:refs/heads/b',
    'git -c x.y=z push origin HEAD:refs/heads/b',
    'git --no-pager push origin HEAD:refs/heads/b',
    '/usr/bin/git push origin HEAD:refs/heads/b',
    "'git' push origin HEAD:refs/heads/b",
    'env git push origin HEAD:refs/heads/b',
    'git -c alias.p=push p origin HEAD:refs/heads/b',
    'git config alias.p push && git p origin HEAD:refs/heads/b',
    'g=git; $g push origin HEAD:refs/heads/b',
    'git $(echo push) origin HEAD:refs/heads/b',
    "sh -c 'git push origin HEAD:refs/heads/b'",
  ])('%s', async (command) => {
    const { root, pushed } = await repo();
    const r = await exec(root, command, ['--mode', 'bypass', '--no-prompt']);
    expect(await pushed(), r.stderr).toBe(false);
    expect(r.code).toBe(77);
  });

  it('the remote really receives a push that no rule denies (the harness can see a push)', async () => {
    const { root, pushed } = await repo();
    const r = await exec(root, 'git push -q origin HEAD:refs/heads/b', [
      '--mode',
      'bypass',
      '--no-prompt',
      '--grant',
      'run_command:git',
    ]);
    expect(r.code).toBe(77);
    await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ schemaVersion: 1 }));
    const ok = await exec(root, 'git push -q origin HEAD:refs/heads/b', ['--mode', 'bypass', '--no-prompt']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(await pushed()).toBe(true);
  });
});

describe('builtins that evaluate code are never covered by a grant of their name', () => {
  it.each([
    ['printf', "printf -v 'a[$(touch M)]' x"],
    ['printf', "printf -vx 'a[$(touch M)]'"],
    ['test', "test -v 'a[$(touch M)]'"],
    ['[', "[ -v 'a[$(touch M)]' ]"],
    ['let', "let 'a[$(touch M)]'"],
    ['jobs', 'jobs -x touch M'],
    ['compgen', "compgen -C 'touch M' x"],
    ['trap', "trap 'touch M' EXIT"],
    ['command', 'command -p touch M'],
    ['exec', 'exec touch M'],
    ['env', 'env touch M'],
    ['env', "env -S 'touch M'"],
    ['nice', 'nice touch M'],
    ['timeout', 'timeout 5 touch M'],
    ['nohup', 'nohup touch M'],
    ['busybox', 'busybox touch M'],
    ['find', 'find . -maxdepth 0 -exec touch M \\;'],
    ['git', "git -c alias.x='!touch M' x"],
    ['git', "git -c core.pager='touch M' -p log"],
    ['awk', 'awk \'BEGIN { system("touch M") }\''],
    ['sed', "sed -n '1e touch M' v"],
    ['bash', "bash -c 'touch M'"],
  ])('--grant run_command:%s does not cover %s', async (program, command) => {
    const root = await project({});
    const r = await exec(root, command, ['--grant', `run_command:${program}`, '--no-prompt']);
    expect(existsSync(path.join(root, 'M')), r.stderr).toBe(false);
    expect(r.code).toBe(77);
  });

  it('tar --to-command under --grant run_command:tar', async () => {
    const root = await project({});
    await execa('tar', ['-cf', 'x.tar', 'v'], { cwd: root });
    const r = await exec(root, "tar -xf x.tar --to-command='touch M'", [
      '--grant',
      'run_command:tar',
      '--no-prompt',
    ]);
    expect(existsSync(path.join(root, 'M')), r.stderr).toBe(false);
    expect(r.code).toBe(77);
  });

  it('the plain forms are still keyed by their program', async () => {
    const root = await project({});
    const r = await exec(root, 'printf %s x', ['--grant', 'run_command:printf', '--no-prompt']);
    expect(r.code, r.stderr).toBe(0);
  });
});

describe('grants are exact keys, not patterns', () => {
  it("--grant 'run_command:ech*' is refused with USAGE and nothing runs", async () => {
    const root = await project({});
    const r = await exec(root, 'touch M', ['--grant', 'run_command:ech*', '--no-prompt']);
    expect(r.code).toBe(64);
    expect(existsSync(path.join(root, 'M'))).toBe(false);
  });
});

describe('deny run_command(rm -rf *) holds against other spellings of its options', () => {
  it.each(['rm -fr d', 'rm -r -f d', 'rm -f -r d', '/bin/rm -fr d', 'env rm -r -f d', 'find d -delete'])(
    '%s',
    async (command) => {
      const root = await project({ deny: ['run_command(rm -rf *)'] });
      await mkdir(path.join(root, 'd'));
      await writeFile(path.join(root, 'd', 'f'), 'x');
      const r = await exec(root, command, ['--mode', 'bypass', '--no-prompt']);
      expect(existsSync(path.join(root, 'd', 'f')), r.stderr).toBe(true);
      expect(r.code).toBe(77);
    },
  );
});

describe('a variable holding a command is read as one (git runs GIT_SSH_COMMAND)', () => {
  it.each([
    "GIT_SSH_COMMAND='rm v' git ls-remote ssh://h/r",
    "env GIT_SSH_COMMAND='rm v' git ls-remote ssh://h/r",
    "export GIT_SSH_COMMAND='rm v'; git ls-remote ssh://h/r",
    "x='rm v'; GIT_SSH_COMMAND=$x git ls-remote ssh://h/r",
    "read x <<< 'rm v'; GIT_SSH_COMMAND=$x git ls-remote ssh://h/r",
  ])('%s', async (command) => {
    const root = await project({ deny: ['run_command(rm *)'] });
    await execa('git', ['init', '-q'], { cwd: root });
    await execa(
      'git',
      ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '--allow-empty', '-m', 'x'],
      {
        cwd: root,
      },
    );
    const r = await exec(root, command, ['--mode', 'bypass', '--no-prompt']);
    expect(existsSync(path.join(root, 'v')), r.stderr).toBe(true);
    expect(r.code).toBe(77);
  });

  it('control: with no deny rule git really runs the variable and v is deleted', async () => {
    const root = await project({});
    await execa('git', ['init', '-q'], { cwd: root });
    await execa(
      'git',
      ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '--allow-empty', '-m', 'x'],
      {
        cwd: root,
      },
    );
    const r = await exec(root, "GIT_SSH_COMMAND='rm v' git ls-remote ssh://h/r", [
      '--mode',
      'bypass',
      '--no-prompt',
    ]);
    expect(r.code).not.toBe(77);
    expect(existsSync(path.join(root, 'v'))).toBe(false);
  });
});

describe('a deny rule written with a path denies the program by name too', () => {
  it.each(['rm v', '\\rm v', 'env rm v', 'f=v; rm $f'])(
    'run_command(/bin/rm *) denies %s',
    async (command) => {
      const root = await project({ deny: ['run_command(/bin/rm *)'] });
      const r = await exec(root, command, ['--mode', 'bypass', '--no-prompt']);
      expect(existsSync(path.join(root, 'v')), r.stderr).toBe(true);
      expect(r.code).toBe(77);
    },
  );
});

describe('deny rules stay rules about programs: commands that do not run the program still run', () => {
  it.each([
    ['run_command(rm *)', 'echo rm v'],
    ['run_command(rm *)', 'printf "%s\\n" "rm v" | grep rm'],
    ['run_command(git push*)', 'git log --grep=push; true'],
    ['run_command(rm -rf *)', 'rm -f nothing-here'],
  ])('%s lets %s run', async (rule, command) => {
    const root = await project({ deny: [rule] });
    await execa('git', ['init', '-q'], { cwd: root });
    const r = await exec(root, command, ['--mode', 'bypass', '--no-prompt']);
    expect(r.code, r.stderr).not.toBe(77);
    expect(existsSync(path.join(root, 'v'))).toBe(true);
  });
});
