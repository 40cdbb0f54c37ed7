/** Words a shell would split, glob, expand or unquote if capsule wrote them bare. */
export const HOSTILE_WORDS: readonly string[] = [
  "it's",
  '$(touch x)',
  '`id`',
  'a b',
  '*',
  'run_command:rm *',
  '',
  "'",
  '\\',
  '~root',
  'a;b',
  '!x',
];
