import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/*
 * The floors of docs/architecture.md, lowest first, one rank each: a module may import its own folder
 * and any lower floor, never a higher one, and no import cycle may exist at all. Two folders never
 * share a rank, so every arrow between them has one allowed direction.
 */
const RANK: Record<string, number> = {
  // the ground floor: no capsule concept (errors, strict JSON, atomic writes, locks, folders, globs, diff)
  base: 0,
  // the project's vocabulary: capsule.json and its updates, modes, engines, key syntax, environments,
  // what in a project is capsule's own (protected state), the per-user state key
  project: 1,
  manifest: 2,
  registry: 3,
  cases: 4,
  // decides and records: owns every audit record type
  permissions: 5,
  network: 6,
  runners: 7,
  telemetry: 8,
  tools: 9,
  executor: 10,
  compare: 11,
  ci: 12,
  learn: 13,
  runtime: 14,
  agent: 15,
  mcp: 16,
  cli: 17,
};
/** The library API sits above everything it exports; nothing else lives at the top of src/. */
const TOP = new Set(['index.ts']);

const SRC = path.resolve('src');
const IMPORT =
  /(?:^|\n)\s*(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\sfrom\s+)?['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)/g;

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) sourceFiles(p, out);
    else if (entry.name.endsWith('.ts')) out.push(p);
  }
  return out;
}

/** src-relative file → the src-relative files it imports (static, type-only and dynamic alike). */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const text = readFileSync(file, 'utf8');
    const deps = new Set<string>();
    for (const m of text.matchAll(IMPORT)) {
      const spec = (m[1] ?? m[2]) as string;
      deps.add(path.relative(SRC, path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts'))));
    }
    graph.set(path.relative(SRC, file), [...deps]);
  }
  return graph;
}

const part = (file: string): string => (file.includes('/') ? (file.split('/')[0] as string) : '(root)');

function cycles(graph: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (v: string): void => {
    state.set(v, 'open');
    stack.push(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (state.get(w) === 'open') found.push([...stack.slice(stack.indexOf(w)), w]);
      else if (state.get(w) === undefined) visit(w);
    }
    stack.pop();
    state.set(v, 'done');
  };
  for (const v of graph.keys()) if (state.get(v) === undefined) visit(v);
  return found;
}

describe('architecture: dependencies point inward', () => {
  const graph = importGraph();

  it('reads the import graph (the test itself can fail)', () => {
    expect(graph.get('cli/main.ts')?.length ?? 0).toBeGreaterThan(0);
    expect(
      cycles(
        new Map([
          ['a', ['b']],
          ['b', ['a']],
        ]),
      ),
    ).toEqual([['a', 'b', 'a']]);
  });

  it('every folder of src/ has a layer', () => {
    const unknown = [...graph.keys()].filter((f) => !TOP.has(f) && RANK[part(f)] === undefined);
    expect(unknown).toEqual([]);
  });

  it('has no import cycle', () => {
    expect(cycles(graph).map((c) => c.join(' → '))).toEqual([]);
  });

  it('has no edge from a lower layer to a higher one', () => {
    const back: string[] = [];
    for (const [from, deps] of graph) {
      if (TOP.has(from)) continue;
      for (const to of deps) {
        if (TOP.has(to)) back.push(`${from} → ${to}`);
        const a = RANK[part(from)] as number;
        const b = RANK[part(to)] as number;
        if (part(from) !== part(to) && b > a) back.push(`${from} → ${to}`);
      }
    }
    expect(back).toEqual([]);
  });

  it('a CLI command imports no other command (shared parts live in src/cli)', () => {
    const across: string[] = [];
    for (const [from, deps] of graph) {
      if (!from.startsWith('cli/commands/')) continue;
      const own = path.basename(from, '.ts');
      for (const to of deps) {
        // A command's own lazily loaded action module (rules.ts → rules-check.ts) is that command.
        if (to.startsWith('cli/commands/') && !path.basename(to).startsWith(`${own}-`)) {
          across.push(`${from} → ${to}`);
        }
      }
    }
    expect(across).toEqual([]);
  });
});

/** Source text without comments (a comment may name process.env; only code counts). */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
}

describe('architecture: the outside world is injected', () => {
  // The entry point builds CliIO from the process; the composition root's explicit default is the one
  // place a library caller's missing `env` becomes process.env.
  const ALLOWED = new Set(['cli/main.ts', 'runtime/runtime.ts']);

  it('nothing under src/ reads process.env or process.stdin but the entry point and the composition root', () => {
    const readers = sourceFiles(SRC)
      .map((f) => path.relative(SRC, f))
      .filter((f) => !ALLOWED.has(f))
      .filter((f) => /process\.(env|stdin)\b/.test(code(readFileSync(path.join(SRC, f), 'utf8'))));
    expect(readers).toEqual([]);
  });

  it('the check sees a read (the test itself can fail)', () => {
    expect(/process\.(env|stdin)\b/.test(code('const e = process.env; // process.stdin'))).toBe(true);
    expect(/process\.(env|stdin)\b/.test(code('/** default process.env */ const e = 1;'))).toBe(false);
  });
});

/** `new CapsuleError(` calls inside a `catch (x) {` block that pass no `cause`: where a wrap hides its cause. */
function wrapsWithoutCause(text: string): number[] {
  const lines: number[] = [];
  for (const m of text.matchAll(/catch \((\w+)\) \{/g)) {
    const from = (m.index ?? 0) + m[0].length;
    let depth = 1;
    for (let k = from; k < text.length && depth > 0; k++) {
      const ch = text[k];
      if (ch === '{') depth++;
      else if (ch === '}') depth--;
      else if (depth > 0 && text.startsWith('new CapsuleError(', k)) {
        let d = 0;
        let end = k;
        for (let j = k + 'new CapsuleError'.length; j < text.length; j++) {
          if (text[j] === '(') d++;
          else if (text[j] === ')' && --d === 0) {
            end = j;
            break;
          }
        }
        if (!text.slice(k, end).includes('cause')) lines.push(text.slice(0, k).split('\n').length);
        k = end;
      }
    }
  }
  return lines;
}

describe('errors: a wrap keeps its cause', () => {
  it('every CapsuleError made in a catch block passes the caught error as cause', () => {
    const missing = sourceFiles(SRC).flatMap((f) =>
      wrapsWithoutCause(readFileSync(f, 'utf8')).map((line) => `${path.relative(SRC, f)}:${line}`),
    );
    expect(missing).toEqual([]);
  });

  it('the check finds a wrap without cause (the test itself can fail)', () => {
    expect(wrapsWithoutCause("try { x() } catch (err) { throw new CapsuleError('USAGE', 'no'); }")).toEqual([
      1,
    ]);
    expect(
      wrapsWithoutCause(
        "try { x() } catch (err) { throw new CapsuleError('USAGE', 'no', {}, { cause: err }); }",
      ),
    ).toEqual([]);
  });
});

describe('the code speaks for itself', () => {
  it('no file under src/, test/ or docs/ cites documents that are not in the repository', () => {
    const roots = ['src', 'test', 'docs'].map((r) => path.resolve(r));
    const all = (dir: string, out: string[] = []): string[] => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = path.join(dir, e.name);
        if (e.isDirectory()) all(p, out);
        else if (/\.(ts|mjs|md)$/.test(e.name)) out.push(p);
      }
      return out;
    };
    // Split so this file does not match itself.
    const cite = new RegExp(['(^|[^R])MISS', 'ION\\b|\\bseed 0\\d'].join(''));
    const citing = roots
      .flatMap((r) => all(r))
      .filter((f) => cite.test(readFileSync(f, 'utf8')))
      .map((f) => path.relative(process.cwd(), f));
    expect(citing).toEqual([]);
  });
});
