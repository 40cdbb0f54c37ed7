import path from 'node:path';
import type { Observation } from './types.js';

/** Debian's strace: the tracer of a learning shell run. It runs inside the run's confinement, as its first process. */
export const TRACER = 'strace';

/**
 * The calls recorded: files opened, created, renamed, removed and executed, and sockets connected. Stat and
 * access calls are left out: a PATH search probes a dozen folders, and probing is not using.
 */
const TRACED_CALLS = [
  'open',
  'openat',
  'openat2',
  'creat',
  'truncate',
  'execve',
  'execveat',
  'rename',
  'renameat',
  'renameat2',
  'unlink',
  'unlinkat',
  'rmdir',
  'mkdir',
  'mkdirat',
  'link',
  'linkat',
  'symlink',
  'symlinkat',
  'connect',
];

/**
 * `strace … -- command`: every process of the run (`-f`), one file per process (`-ff`, so lines never
 * interleave), descriptors printed with their paths (`-y`, so a relative name comes with its folder and an
 * opened file with its real path). `--seccomp-bpf` stops the tracee only at the traced calls.
 */
export function tracerArgs(outputPrefix: string, command: readonly string[]): string[] {
  return [
    '-f',
    '-ff',
    '-qq',
    '-y',
    '--seccomp-bpf',
    '-e',
    `trace=${TRACED_CALLS.join(',')}`,
    '-e',
    'signal=none',
    '-o',
    outputPrefix,
    '--',
    ...command,
  ];
}

/** A C string as strace prints it (`"a\"b\n"`), decoded; undefined when it is not one. */
function cString(text: string): string | undefined {
  if (!text.startsWith('"')) return undefined;
  let out = '';
  for (let i = 1; i < text.length; i++) {
    const c = text[i] as string;
    if (c === '"') return out;
    if (c !== '\\') {
      out += c;
      continue;
    }
    const n = text[++i];
    if (n === 'n') out += '\n';
    else if (n === 't') out += '\t';
    else if (n === 'x') {
      out += String.fromCharCode(parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else if (n !== undefined && /[0-7]/.test(n)) {
      const oct = /^[0-7]{1,3}/.exec(text.slice(i))?.[0] ?? n;
      out += String.fromCharCode(parseInt(oct, 8));
      i += oct.length - 1;
    } else out += n ?? '';
  }
  return undefined;
}

/** Split a call's argument list at top-level commas (strings, braces and brackets kept whole). */
function splitArgs(text: string): string[] {
  const args: string[] = [];
  let depth = 0;
  let start = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '{' || c === '[' || c === '(') depth++;
    else if (c === '}' || c === ']' || c === ')') depth--;
    else if (c === ',' && depth === 0) {
      args.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  args.push(text.slice(start).trim());
  return args;
}

/** The folder a `-y` descriptor argument names (`AT_FDCWD</a/b>`, `3</a/b>`). */
function fdPath(arg: string | undefined): string | undefined {
  const m = /<(\/[^>]*)>$/.exec(arg ?? '');
  return m?.[1];
}

/** An absolute path for a name relative to a descriptor (or absolute already). */
function resolveAt(dir: string | undefined, name: string | undefined): string | undefined {
  if (name === undefined) return undefined;
  if (path.isAbsolute(name)) return path.normalize(name);
  return dir === undefined ? undefined : path.resolve(dir, name);
}

const CALL = /^(\w+)\((.*)\)\s+=\s+(-?\d+|\?)(?:<([^>]*)>)?(?:\s+(\w+))?/;

/**
 * One line of the tracer's output, as what was tried; undefined for anything else (exits, resumed calls,
 * calls not about files or sockets). Pure.
 */
export function parseTraceLine(line: string): Observation[] {
  const m = CALL.exec(line.trim());
  if (m === null) return [];
  const [, call, argText = '', ret = '', retPath] = m;
  const ok = ret !== '-1' && ret !== '?';
  const outcome: Observation['outcome'] = ok
    ? 'ok'
    : /EACCES|EPERM|EROFS/.test(m[5] ?? '')
      ? 'refused'
      : 'failed';
  const args = splitArgs(argText);
  const via = 'tracer';
  const file = (op: Observation['op'], p: string | undefined): Observation[] =>
    p === undefined ? [] : [{ op, path: p, outcome, via }];
  switch (call) {
    case 'open':
    case 'openat':
    case 'openat2': {
      const at = call === 'open' ? 0 : 1;
      const name = cString(args[at] ?? '');
      const target =
        ok && retPath !== undefined && retPath.startsWith('/')
          ? retPath
          : resolveAt(call === 'open' ? undefined : fdPath(args[0]), name);
      const flags = args[at + 1] ?? '';
      const op: Observation['op'] = /O_WRONLY|O_RDWR|O_TRUNC/.test(flags)
        ? /O_CREAT/.test(flags)
          ? 'create'
          : 'write'
        : /O_DIRECTORY/.test(flags)
          ? 'list'
          : /O_CREAT/.test(flags)
            ? 'create'
            : 'read';
      return file(op, target);
    }
    case 'creat':
      return file('create', resolveAt(undefined, cString(args[0] ?? '')));
    case 'truncate':
      return file('write', resolveAt(undefined, cString(args[0] ?? '')));
    case 'execve':
      return file('exec', resolveAt(undefined, cString(args[0] ?? '')));
    case 'execveat':
      return file('exec', resolveAt(fdPath(args[0]), cString(args[1] ?? '')));
    case 'rename':
      return [
        ...file('remove', resolveAt(undefined, cString(args[0] ?? ''))),
        ...file('create', resolveAt(undefined, cString(args[1] ?? ''))),
      ];
    case 'renameat':
    case 'renameat2':
      return [
        ...file('remove', resolveAt(fdPath(args[0]), cString(args[1] ?? ''))),
        ...file('create', resolveAt(fdPath(args[2]), cString(args[3] ?? ''))),
      ];
    case 'unlink':
    case 'rmdir':
      return file('remove', resolveAt(undefined, cString(args[0] ?? '')));
    case 'unlinkat':
      return file('remove', resolveAt(fdPath(args[0]), cString(args[1] ?? '')));
    case 'mkdir':
    case 'symlink':
    case 'link':
      return file('create', resolveAt(undefined, cString(args[call === 'mkdir' ? 0 : 1] ?? '')));
    case 'mkdirat':
      return file('create', resolveAt(fdPath(args[0]), cString(args[1] ?? '')));
    case 'symlinkat':
      return file('create', resolveAt(fdPath(args[1]), cString(args[2] ?? '')));
    case 'linkat':
      return file('create', resolveAt(fdPath(args[2]), cString(args[3] ?? '')));
    case 'connect':
      return connectObservation(args[1] ?? '', ok || m[5] === 'EINPROGRESS' ? 'ok' : outcome);
    default:
      return [];
  }
}

/** A connect() address: an IP and port, or a unix socket's path. */
function connectObservation(addr: string, outcome: Observation['outcome']): Observation[] {
  const via = 'tracer';
  const unix = /sun_path=("(?:[^"\\]|\\.)*")/.exec(addr);
  if (unix !== null) {
    const p = cString(unix[1] ?? '');
    // An abstract socket (a leading NUL) has no path on the host.
    return p === undefined
      ? []
      : [{ op: 'connect', path: p.startsWith('\0') ? `@${p.slice(1)}` : p, outcome, via }];
  }
  const port = /sin6?_port=htons\((\d+)\)/.exec(addr)?.[1];
  const v4 = /inet_addr\("([^"]+)"\)/.exec(addr)?.[1];
  const v6 = /inet_pton\(AF_INET6,\s*"([^"]+)"/.exec(addr)?.[1];
  const host = v4 ?? (v6 !== undefined ? `[${v6}]` : undefined);
  if (host === undefined || port === undefined) return [];
  return [{ op: 'connect', host, port: Number(port), outcome, via }];
}

/** Every observation in a tracer's output files (one per process), in a stable order, without repeats. */
export function parseTrace(files: readonly string[]): Observation[] {
  const seen = new Set<string>();
  const out: Observation[] = [];
  for (const text of files) {
    for (const line of text.split('\n')) {
      for (const o of parseTraceLine(line)) {
        const key = JSON.stringify(o);
        if (seen.has(key)) continue;
        seen.add(key);
        out.push(o);
      }
    }
  }
  return out;
}
