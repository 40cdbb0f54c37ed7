/**
 * How capsule writes a string as one POSIX shell word: in the commands it suggests to a person, the
 * command lines it shows, and the scripts it generates. Inside single quotes nothing expands; a `'`
 * becomes `'\''`.
 */
export function singleQuoted(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

/** Characters that are never special to a shell (no glob, expansion, quote or separator among them). */
const PLAIN_WORD = /^[A-Za-z0-9_./:=@%+,-]+$/;

/** One shell word, quoted only when it needs it (what a person reads and copies). */
export function shellWord(text: string): string {
  return PLAIN_WORD.test(text) ? text : singleQuoted(text);
}
