import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempProject } from '../../helpers/capability.js';

/** A temp project (a git repository) with a victim file `v` and deny `run_command(rm *)`. */
async function project(): Promise<string> {
  const { root } = await tempProject('capsule-redteam-rules-');
  await writeFile(
    path.join(root, 'capsule.json'),
    JSON.stringify({ schemaVersion: 1, permissions: { deny: ['run_command(rm *)'] } }),
  );
  await writeFile(path.join(root, 'v'), 'victim');
  await execa('git', ['init', '-q'], { cwd: root });
  return root;
}

// Bypass mode: only the deny rule stands between the command and `v`.
const exec = (root: string, command: string) =>
  cli(['exec', '--mode', 'bypass', '--no-prompt', '--', command], { cwd: root });

const fsmonitor = 'printf "[core]\\n\\tfsmonitor = rm v\\n"';

describe('deny run_command(rm *) holds against code that arithmetic evaluates from run-time text', () => {
  it.each([
    // `$(` spelled with backslashes or ANSI-C escapes, so no literal holds it.
    'x=a[\\$\\(rm\\ v\\)]; echo $((x))',
    'x=a[\\$\\(rm\\ v\\)]; let x',
    'x=a[\\$\\(rm\\ v\\)]; [[ x -eq 1 ]]',
    "x=$'a[\\x24(rm v)]'; echo $((x))",
    // `(( … ))` as a statement evaluates like `$(( … ))`.
    'x="a[\\$(rm v)]"; (( x ))',
    // The text arrives at run time: a file, command output, read, mapfile, a file name from a glob.
    "echo 'a[$''(rm v)]' > f; echo $(( $(cat f) ))",
    "echo 'a[$''(rm v)]' > f; read x < f; echo $((x))",
    "echo 'a[$''(rm v)]' > f; mapfile -t A < f; (( A ))",
    "echo 'a[$''(rm v)]' > f; declare -i y; y=$(cat f)",
    "echo 'a[$''(rm v)]' > f; x=$(cat f); [[ $x -eq 0 ]]",
    "y=$(printf 'a[\\x24(rm v)]'); (( y ))",
    'y=$(echo YVskKHJtIHYpXQ== | base64 -d); echo $((y))',
    "touch 'a[$(rm v)]'; for f in a*; do (( f )); done",
  ])('%s', async (command) => {
    const root = await project();
    const r = await exec(root, command);
    expect(existsSync(path.join(root, 'v')), r.stderr).toBe(true);
    expect(r.code).toBe(77);
  });
});

describe('deny run_command(rm *) holds against programs that run code they read or are told', () => {
  it.each([
    // Interpreters reading their program from stdin, as `bash` alone does.
    'python3 <<< \'import os; os.system("rm v")\'',
    'python3 - <<< \'import os; os.system("rm v")\'',
    'perl <<< \'system("rm v")\'',
    'node <<< \'require("child_process").execSync("rm v")\'',
    // make recipes given inline or on a stream.
    'make -f /dev/stdin <<< "all:; rm v"',
    'make -f- <<< "all:; rm v"',
    'make --eval="all:; rm v"',
    // Package runners.
    'npm exec -c "rm v"',
    'npx -c "rm v"',
    // ssh runs ProxyCommand locally before it connects.
    'ssh -o ProxyCommand="rm v" x',
    // git finds the program to run in configuration named by a variable or written just before.
    `GIT_CONFIG_PARAMETERS="'core.fsmonitor'='rm v'" git status`,
    'git config core.fsmonitor "rm v"; git status',
    'git config --local core.fsmonitor "rm v" && git status',
    `${fsmonitor} > .gitconfig; HOME=. git status`,
    `${fsmonitor} > .gitconfig; export HOME=.; git status`,
    `${fsmonitor} > .gitconfig; printf -v HOME .; git status`,
    `${fsmonitor} > g; GIT_CONFIG_SYSTEM=g git status`,
    `${fsmonitor} > g; GIT_CONFIG_GLOBAL=g git status`,
  ])('%s', async (command) => {
    const root = await project();
    const r = await exec(root, command);
    expect(existsSync(path.join(root, 'v')), r.stderr).toBe(true);
    expect(r.code).toBe(77);
  });

  it.each([
    // One part writes a file, another runs it as code: what runs is not on the command line.
    `${fsmonitor} >> .git/config; git status`,
    'printf "all:\\n\\trm v\\n" > M; make -f M',
    'printf "all:\\n\\trm v\\n" > Makefile && make',
    'echo cm0gdgo= | base64 -d > s; bash s',
    'echo cm0gdgo= | base64 -d | tee s.sh >/dev/null; sh ./s.sh',
    'echo "import os; os.system(\'rm v\')" > p.py && python3 p.py',
    'printf "rm v" > x; cp x run.sh; bash run.sh',
    'printf "#!/bin/sh\\nrm v\\n" > t && chmod +x t && ./t',
    'f=s; echo cm0gdgo= | base64 -d > $f; bash s',
  ])('written, then run as code: %s', async (command) => {
    const root = await project();
    const r = await exec(root, command);
    expect(existsSync(path.join(root, 'v')), r.stderr).toBe(true);
    expect(r.code).toBe(77);
  });

  it('ordinary commands beside a deny rule still run', async () => {
    const root = await project();
    for (const command of [
      'ls * > out1',
      'echo $(date) > out2',
      'for ((i=0;i<2;i++)); do echo $i; done > out3',
      'python3 --version > out4',
      'git config user.name x && git status --short > out5',
      'echo "echo hi" > script.sh && bash other.sh 2>/dev/null; echo done > out6',
    ]) {
      const r = await exec(root, command);
      expect(r.code, `${command}: ${r.stderr}`).toBe(0);
    }
    for (const f of ['out1', 'out2', 'out3', 'out4', 'out5', 'out6'])
      expect(existsSync(path.join(root, f))).toBe(true);
  });
});
