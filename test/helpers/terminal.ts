import { execa } from 'execa';
import { BUILT_CLI } from './cli.js';

/**
 * Run the built CLI under a pseudo-terminal (util-linux script), typing `answers` once the prompt
 * shows (`waitFor`, default the permission prompt's last words; lines typed ahead are queued by the prompt, so a whole dialogue can be typed at once). A run
 * that never prompts ends by itself with nothing typed.
 */
export async function inTerminal(
  cwd: string,
  args: string[],
  answers: string,
  options: { env?: NodeJS.ProcessEnv; waitFor?: string } = {},
): Promise<{ code: number; output: string }> {
  const waitFor = options.waitFor ?? '(default: deny)';
  const quoted = ['node', BUILT_CLI, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const child = execa('script', ['-qfec', quoted, '/dev/null'], {
    cwd,
    env: options.env ?? process.env,
    reject: false,
    timeout: 60_000,
  });
  let output = '';
  let typed = false;
  child.stdout?.on('data', (c: Buffer) => {
    output += c.toString();
    if (!typed && output.includes(waitFor)) {
      typed = true;
      child.stdin?.write(answers);
    }
  });
  const r = await child;
  return { code: r.exitCode ?? -1, output };
}
