import { lstat, mkdir, open, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { CapsuleError } from '../base/errors.js';
import { LinearRegexEngine } from '../base/linear-regex.js';
import { GlobCache } from '../base/glob.js';
import { makeKey, WRITE_FILE } from '../permissions/keys.js';
import { askHost, defineTool, askNone, type AgentTool } from './define.js';
import { unifiedDiff } from '../base/text-diff.js';
import type { DeclaredPermission } from './tool.js';
import type { ResolvedPath, Workspace } from './workspace.js';
import type { AgentToolContext } from './ports.js';

/** Files larger than this are not read whole by read_file / grep / diff. */
export const MAX_READ_BYTES = 4 * 1024 * 1024;
/** Content accepted by write_file / edit_file. */
export const MAX_WRITE_BYTES = 4 * 1024 * 1024;
const MAX_WALK_ENTRIES = 50_000;
/** Folders a walk never enters: VCS internals and dependency trees. */
const SKIPPED_DIRS = new Set(['.git', 'node_modules']);

const pathArg = (what: string) =>
  z
    .string()
    .min(1)
    .max(4096)
    .describe(`${what}, relative to the project root (absolute paths must stay inside it).`);

async function readText(file: ResolvedPath, field: string): Promise<string> {
  if (!file.exists) {
    throw new CapsuleError('NOT_FOUND', `${field}: ${file.relative} does not exist.`, { field });
  }
  const st = await lstat(file.real);
  if (!st.isFile())
    throw new CapsuleError('USAGE', `${field}: ${file.relative} is not a regular file.`, { field });
  if (st.size > MAX_READ_BYTES) {
    throw new CapsuleError(
      'USAGE',
      `${field}: ${file.relative} is ${st.size} bytes, over the ${MAX_READ_BYTES}-byte limit.`,
      {
        field,
        hint: 'Use grep to find the part you need.',
      },
    );
  }
  return readFile(file.real, 'utf8');
}

async function looksBinary(file: string): Promise<boolean> {
  const handle = await open(file, 'r');
  try {
    const buf = Buffer.alloc(8192);
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead).includes(0);
  } finally {
    await handle.close();
  }
}

/**
 * Every regular file under `base` (relative to the workspace root). Symlinks are not followed: a link
 * could lead out of the project, and the walk must stay inside it.
 */
async function* walkFiles(workspace: Workspace, base: string, signal?: AbortSignal): AsyncGenerator<string> {
  const stack = [base];
  let seen = 0;
  while (stack.length > 0) {
    if (signal?.aborted) return;
    const dir = stack.pop() as string;
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    entries.sort((x, y) => (x.name < y.name ? 1 : x.name > y.name ? -1 : 0));
    for (const entry of entries) {
      if (++seen > MAX_WALK_ENTRIES) return;
      const abs = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!SKIPPED_DIRS.has(entry.name)) stack.push(abs);
      } else if (entry.isFile()) {
        yield workspace.relativeOf(abs);
      }
    }
  }
}

function checkGlob(pattern: string, field: string): void {
  if (pattern.startsWith('/') || pattern.split('/').includes('..')) {
    throw new CapsuleError(
      'PATH_ESCAPE',
      `${field}: "${pattern}" must be a relative glob without ".." segments.`,
      {
        field,
        hint: 'Globs match paths inside the project root, e.g. src/**/*.ts.',
      },
    );
  }
}

/**
 * The read-only tools declare Permission::None on the path they read (or search from), resolved: a path outside
 * the project is refused before the call is judged.
 */
async function readPermission(workspace: Workspace, rawPath: string): Promise<DeclaredPermission> {
  return askNone((await workspace.resolve(rawPath, 'path')).relative);
}

/**
 * A read-only tool of one path (read_file, glob, grep): Permission::None on `reads(args)` as above, after
 * `check` has refused arguments it cannot take.
 */
function defineReadTool<S extends z.ZodType, R>(tool: {
  name: string;
  description: string;
  parameters: S;
  reads(args: z.infer<S>): string;
  check?(args: z.infer<S>): void;
  execute(args: z.infer<S>, ctx: AgentToolContext): Promise<R>;
}): AgentTool {
  return defineTool({
    name: tool.name,
    description: tool.description,
    kind: 'READ_ONLY',
    parameters: tool.parameters,
    async permission(args, ctx) {
      tool.check?.(args);
      return readPermission(ctx.workspace, tool.reads(args));
    },
    execute: (args, ctx) => tool.execute(args, ctx),
  });
}

// --- read-only ---------------------------------------------------------------------------------

const readFileParameters = z.strictObject({
  path: pathArg('File to read'),
  offset: z.int().min(1).optional().describe('First line to return (1-based). Default 1.'),
  limit: z.int().min(1).max(100_000).optional().describe('Number of lines to return. Default: all.'),
});

export function createReadFileTool(): AgentTool {
  return defineReadTool({
    name: 'read_file',
    description: 'Read a text file inside the project (optionally a range of lines).',
    parameters: readFileParameters,
    reads: (args) => args.path,
    async execute(args, ctx) {
      const file = await ctx.workspace.resolve(args.path, 'path');
      const text = await readText(file, 'path');
      const lines = text.split('\n');
      const start = (args.offset ?? 1) - 1;
      const end = args.limit === undefined ? lines.length : start + args.limit;
      return {
        path: file.relative,
        totalLines: lines.length,
        content:
          args.offset === undefined && args.limit === undefined ? text : lines.slice(start, end).join('\n'),
      };
    },
  });
}

const globParameters = z.strictObject({
  pattern: z
    .string()
    .min(1)
    .max(1024)
    .describe('Path glob: `*` and `?` stay inside one segment, `**` spans folders, e.g. src/**/*.ts.'),
  path: pathArg('Folder to search from')
    .optional()
    .describe('Folder to search from (default: the project root).'),
  maxResults: z.int().min(1).max(10_000).default(1000).describe('Stop after this many matches.'),
});

export function createGlobTool(): AgentTool {
  return defineReadTool({
    name: 'glob',
    description: 'List files inside the project whose path matches a glob (relative to the search folder).',
    parameters: globParameters,
    reads: (args) => args.path ?? '.',
    check: (args) => checkGlob(args.pattern, 'pattern'),
    async execute(args, ctx) {
      checkGlob(args.pattern, 'pattern');
      const base = await ctx.workspace.resolve(args.path ?? '.', 'path');
      const re = new GlobCache().path(args.pattern);
      const prefix = base.relative === '.' ? '' : `${base.relative}/`;
      const files: string[] = [];
      let truncated = false;
      for await (const rel of walkFiles(ctx.workspace, base.real, ctx.signal)) {
        if (!re.test(rel.slice(prefix.length))) continue;
        if (files.length >= args.maxResults) {
          truncated = true;
          break;
        }
        files.push(rel);
      }
      return { files: files.sort(), truncated };
    },
  });
}

const grepParameters = z.strictObject({
  pattern: z
    .string()
    .min(1)
    .max(1024)
    .describe(
      'Regular expression (JavaScript syntax, as with the u flag; no backreferences or lookaround) searched line by line.',
    ),
  path: pathArg('File or folder to search')
    .optional()
    .describe('File or folder to search (default: the project root).'),
  glob: z
    .string()
    .max(1024)
    .optional()
    .describe('Only files whose path (relative to `path`) matches this glob.'),
  ignoreCase: z.boolean().default(false).describe('Case-insensitive match.'),
  maxResults: z.int().min(1).max(10_000).default(500).describe('Stop after this many matching lines.'),
});

export function createGrepTool(): AgentTool {
  const regex = new LinearRegexEngine();
  return defineReadTool({
    name: 'grep',
    description:
      'Search text files inside the project for a regular expression; returns file, line number and line.',
    parameters: grepParameters,
    reads: (args) => args.path ?? '.',
    check: (args) => {
      if (args.glob !== undefined) checkGlob(args.glob, 'glob');
    },
    async execute(args, ctx) {
      // The agent's pattern meets the project's files: linear-time matching, so no pair of them can
      // stall capsule (a backtracking engine takes years on `(a+)+$` and a line of a's).
      await regex.load();
      const compiled = regex.compile(args.pattern, { ignoreCase: args.ignoreCase });
      if (!compiled.ok) throw new CapsuleError('USAGE', `pattern: ${compiled.reason}.`, { field: 'pattern' });
      const re = compiled.regex;
      const base = await ctx.workspace.resolve(args.path ?? '.', 'path');
      if (!base.exists)
        throw new CapsuleError('NOT_FOUND', `path: ${base.relative} does not exist.`, { field: 'path' });
      const filter = args.glob === undefined ? undefined : new GlobCache().path(args.glob);
      const st = await lstat(base.real);
      const prefix = base.relative === '.' ? '' : `${base.relative}/`;
      const matches: Array<{ file: string; line: number; text: string }> = [];
      let truncated = false;
      const files = st.isFile() ? single(base.relative) : walkFiles(ctx.workspace, base.real, ctx.signal);
      outer: for await (const rel of files) {
        if (filter !== undefined && !filter.test(rel.slice(prefix.length))) continue;
        const abs = path.join(ctx.workspace.root, rel);
        let lines: string[];
        try {
          const fst = await lstat(abs);
          if (!fst.isFile() || fst.size > MAX_READ_BYTES || (await looksBinary(abs))) continue;
          lines = (await readFile(abs, 'utf8')).split('\n');
        } catch {
          continue; // removed or unreadable meanwhile: not a match, not a failure
        }
        for (const [i, line] of lines.entries()) {
          if (!re.test(line)) continue;
          if (matches.length >= args.maxResults) {
            truncated = true;
            break outer;
          }
          matches.push({ file: rel, line: i + 1, text: line.length > 500 ? `${line.slice(0, 500)}…` : line });
        }
      }
      return { matches, truncated };
    },
  });
}

async function* single(rel: string): AsyncGenerator<string> {
  yield rel;
}

const diffParameters = z
  .strictObject({
    path: pathArg('File to compare (the old side)'),
    otherPath: pathArg('Second file (the new side)').optional(),
    content: z
      .string()
      .max(MAX_WRITE_BYTES)
      .optional()
      .describe('Proposed new content of `path` (the new side), instead of otherPath.'),
  })
  .refine((a) => (a.otherPath === undefined) !== (a.content === undefined), {
    message: 'give exactly one of otherPath or content',
    path: ['otherPath'],
  });

export function createDiffTool(): AgentTool {
  return defineTool({
    name: 'diff',
    description:
      'Unified diff between a file and another file, or between a file and proposed content (nothing is written).',
    kind: 'READ_ONLY',
    parameters: diffParameters,
    async permission(args, ctx) {
      const declared = await readPermission(ctx.workspace, args.path);
      if (args.otherPath !== undefined) await ctx.workspace.resolve(args.otherPath, 'otherPath');
      return declared;
    },
    async execute(args, ctx) {
      const file = await ctx.workspace.resolve(args.path, 'path');
      const oldText = file.exists ? await readText(file, 'path') : '';
      let newText: string;
      let newLabel: string;
      if (args.otherPath !== undefined) {
        const other = await ctx.workspace.resolve(args.otherPath, 'otherPath');
        newText = await readText(other, 'otherPath');
        newLabel = other.relative;
      } else {
        newText = args.content ?? '';
        newLabel = `${file.relative} (proposed)`;
      }
      return unifiedDiff(oldText, newText, {
        old: file.exists ? file.relative : '/dev/null',
        new: newLabel,
      });
    },
  });
}

// --- file edits --------------------------------------------------------------------------------

/** write_file and edit_file declare the same permission: one write of the file at `args.path`. */
async function writePermission(args: { path: string }, ctx: { workspace: Workspace }) {
  const file = await ctx.workspace.resolveForWrite(args.path, 'path');
  return askHost(
    makeKey(WRITE_FILE, file.relative),
    file.relative,
    'writes a file on the host, inside the project root',
  );
}

/**
 * The one write path of the file tools. The file is resolved again (the tree may have changed between the
 * permission check and now), `contentFor` makes the new text from it, parent folders are created, and the
 * parent is checked once more (mkdir may have raced with a symlink swap) before the atomic write.
 */
async function writeProjectFile(
  workspace: Workspace,
  rawPath: string,
  contentFor: (file: ResolvedPath) => Promise<string>,
): Promise<{ file: ResolvedPath; content: string }> {
  const file = await workspace.resolveForWrite(rawPath, 'path');
  const content = await contentFor(file);
  await mkdir(path.dirname(file.real), { recursive: true });
  const again = await workspace.resolveForWrite(rawPath, 'path');
  await workspace.writeAtomic(again, content);
  return { file, content };
}

const writeFileParameters = z.strictObject({
  path: pathArg('File to write'),
  content: z.string().max(MAX_WRITE_BYTES).describe('The whole new content of the file (UTF-8).'),
});

export function createWriteFileTool(): AgentTool {
  return defineTool({
    name: 'write_file',
    description:
      'Create or replace a text file inside the project (written atomically; parent folders are created).',
    kind: 'FILE_EDIT',
    parameters: writeFileParameters,
    permission: writePermission,
    async execute(args, ctx) {
      const { file } = await writeProjectFile(ctx.workspace, args.path, async (target) => {
        if (target.exists && !(await lstat(target.real)).isFile()) {
          throw new CapsuleError('USAGE', `path: ${target.relative} exists and is not a regular file.`, {
            field: 'path',
          });
        }
        return args.content;
      });
      return { path: file.relative, bytes: Buffer.byteLength(args.content), created: !file.exists };
    },
  });
}

const editFileParameters = z.strictObject({
  path: pathArg('File to edit'),
  oldText: z
    .string()
    .min(1)
    .max(MAX_WRITE_BYTES)
    .describe('Exact text to replace (must occur once unless replaceAll).'),
  newText: z.string().max(MAX_WRITE_BYTES).describe('Replacement text.'),
  replaceAll: z.boolean().default(false).describe('Replace every occurrence instead of exactly one.'),
});

export function createEditFileTool(): AgentTool {
  return defineTool({
    name: 'edit_file',
    description: 'Replace exact text in an existing file inside the project (written atomically).',
    kind: 'FILE_EDIT',
    parameters: editFileParameters,
    permission: writePermission,
    async execute(args, ctx) {
      let count = 0;
      const { file } = await writeProjectFile(ctx.workspace, args.path, async (target) => {
        const text = await readText(target, 'path');
        count = text.split(args.oldText).length - 1;
        return editedText(text, target, count, args);
      });
      return { path: file.relative, replacements: args.replaceAll ? count : 1 };
    },
  });
}

/** edit_file's new text: `oldText` replaced once (it must occur once) or everywhere; nothing past the cap. */
function editedText(
  text: string,
  file: ResolvedPath,
  count: number,
  args: { oldText: string; newText: string; replaceAll: boolean },
): string {
  if (count === 0) {
    throw new CapsuleError('USAGE', `oldText: not found in ${file.relative}; nothing was changed.`, {
      field: 'oldText',
      hint: 'Copy the exact text (whitespace included) from read_file.',
    });
  }
  if (count > 1 && !args.replaceAll) {
    throw new CapsuleError(
      'USAGE',
      `oldText: occurs ${count} times in ${file.relative}; nothing was changed.`,
      {
        field: 'oldText',
        hint: 'Include more surrounding text so it is unique, or set replaceAll: true.',
      },
    );
  }
  const updated = args.replaceAll
    ? text.split(args.oldText).join(args.newText)
    : text.replace(args.oldText, () => args.newText);
  if (Buffer.byteLength(updated) > MAX_WRITE_BYTES) {
    throw new CapsuleError(
      'USAGE',
      `The edited file would pass ${MAX_WRITE_BYTES} bytes; nothing was changed.`,
    );
  }
  return updated;
}
