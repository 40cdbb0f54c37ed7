import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/*
 * No room too big to read: a source file holds at most MAX_FILE_LINES lines and a function at most
 * MAX_FUNCTION_LINES (a function's lines include the functions written inside it, so a long factory
 * cannot hide its body in closures). A concept that needs more gets a folder with a file per seam.
 */
const MAX_FILE_LINES = 800;
const MAX_FUNCTION_LINES = 150;

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) sourceFiles(p, out);
    else if (entry.name.endsWith('.ts')) out.push(p);
  }
  return out;
}

/** Every function-like node with a body longer than `limit` lines, as `file:line name (N lines)`. */
function longFunctions(file: string, text: string, limit: number): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const lineOf = (pos: number): number => source.getLineAndCharacterOfPosition(pos).line + 1;
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body !== undefined) {
      const lines = lineOf(node.end) - lineOf(node.getStart(source)) + 1;
      if (lines > limit) {
        const named = node.name ?? (ts.isVariableDeclaration(node.parent) ? node.parent.name : undefined);
        found.push(
          `${file}:${lineOf(node.getStart(source))} ${named?.getText(source) ?? '(anonymous)'} (${lines} lines)`,
        );
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('no room too big to read', () => {
  const files = sourceFiles(path.resolve('src')).map((f) => ({
    file: path.relative(process.cwd(), f),
    text: readFileSync(f, 'utf8'),
  }));

  it(`no file under src/ is over ${MAX_FILE_LINES} lines`, () => {
    const big = files
      .map(({ file, text }) => ({ file, lines: text.split('\n').length }))
      .filter((f) => f.lines > MAX_FILE_LINES)
      .map((f) => `${f.file} (${f.lines} lines)`);
    expect(big).toEqual([]);
  });

  it(`no function under src/ is over ${MAX_FUNCTION_LINES} lines`, () => {
    expect(files.flatMap(({ file, text }) => longFunctions(file, text, MAX_FUNCTION_LINES))).toEqual([]);
  });

  it('the checks see a long function, nested or not (the test itself can fail)', () => {
    const body = Array.from({ length: 5 }, (_, i) => `  const a${i} = ${i};`).join('\n');
    const text = `export function outer() {\n${body}\n  const inner = () => {\n${body}\n  };\n}\n`;
    expect(longFunctions('x.ts', text, 8)).toEqual(['x.ts:1 outer (14 lines)']);
    expect(longFunctions('x.ts', text, 6)).toEqual(['x.ts:1 outer (14 lines)', 'x.ts:7 inner (7 lines)']);
    expect(longFunctions('x.ts', text, 14)).toEqual([]);
  });
});
