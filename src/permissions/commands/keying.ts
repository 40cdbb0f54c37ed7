/**
 * Whether a simple command may be keyed by its program's name, or must be keyed by the whole string.
 */
import { baseName, type Word } from './words.js';
import { EVALUATING_BUILTINS, SHELLS, optionEvaluates } from './shells.js';
import { HAZARD_PROGRAMS, programHazard } from './hazards.js';
import { UNWRAPPED, unwrap } from './unwrap.js';
import { wrapperSpec } from './wrappers.js';

/**
 * Why a simple command is not keyed by its program: it evaluates code, wraps another program, or uses a
 * program's option that runs other programs. undefined: the program's name is its key.
 */
export function keyingHazard(program: string, args: readonly Word[]): string | undefined {
  if (EVALUATING_BUILTINS.has(program)) return `${program} evaluates code in its arguments`;
  if (optionEvaluates(program, args)) return `${program} with this option evaluates code in its arguments`;
  const name = baseName(program);
  const hazard = programHazard(name, args);
  if (hazard !== undefined) return `${name}: ${hazard}`;
  const unwrapped = unwrap(program, args);
  // git without global options lists itself a second time (the form deny rules are written for).
  const others = unwrapped.commands.slice(1).filter((c) => !(name === 'git' && c.name === 'git'));
  if (others.length > 0 || unwrapped.scripts.length > 0 || unwrapped.unprovable.length > 0)
    return `${name} runs another program or shell code`;
  return undefined;
}

/**
 * Whether a command's arguments can change how it is keyed. For any other program the key is its name
 * whatever the arguments, so keying need not read them (speed).
 */
export function argumentsMatter(program: string): boolean {
  const name = baseName(program);
  return (
    EVALUATING_BUILTINS.has(program) ||
    program === 'printf' ||
    program === 'test' ||
    program === '[' ||
    SHELLS.has(name) ||
    UNWRAPPED.has(name) ||
    wrapperSpec(name) !== undefined ||
    HAZARD_PROGRAMS.has(name)
  );
}
