/**
 * The patterns that make a backtracking engine explode, each with an input that does: the family a
 * schema (or a grep) may hold. `^a*a*…b$` is what the heuristic check of before let through.
 */
export const CATASTROPHIC: readonly (readonly [pattern: string, input: string])[] = [
  ['^a*a*a*a*a*a*a*a*a*a*a*a*a*a*b$', 'a'.repeat(36)],
  ['^(a+)+$', `${'a'.repeat(40)}!`],
  ['^(a|a)*$', `${'a'.repeat(40)}!`],
  ['^(a|aa)*c$', 'a'.repeat(80)],
  ['^.*.*.*=.*$', `${'='.repeat(4000)}\n`],
  ['^((a+)+b|(a+)+c)+$', `${'a'.repeat(40)}!`],
  ['^(([a-z])+.)+[A-Z]([a-z])+$', 'a'.repeat(40)],
];
