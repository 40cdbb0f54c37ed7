import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
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

/*
 * The parts of a process that hold files, sockets, processes or workers, each with the file that defines it.
 * Named, not guessed from the code: a class is on this list because what it opens is shared by the whole
 * process (one audit chain and its head, one state key, one engine connection, the runners' workers and
 * containers), so a second copy built elsewhere with other settings would be a second truth. Two checks keep
 * the list whole: every name must still be a class exported from its file (a rename or move fails here, it
 * does not silently drop out), and every class under src/ that `implements Runner` must be on it.
 * Left off on purpose: what a part makes for itself per call or per run (EgressSession, WorkerPool,
 * ExecPool, HostProcesses, ConfinedDir), pure values (SessionAllowlist, MemoryAuditSink, GlobCache) and the
 * surfaces built over a runtime (AgentSession, CapsuleMcpServer).
 */
const IO_PARTS: Record<string, string> = {
  ShellRunner: 'runners/shell-runner.ts',
  WasmRunner: 'runners/wasm/wasm-runner.ts',
  DockerRunner: 'runners/docker/runner.ts',
  SwarmRunner: 'runners/docker/swarm-runner.ts',
  EnginePool: 'runners/docker/engine-pool.ts',
  LazyRunner: 'runners/lazy-runner.ts',
  DockerodeEngine: 'runners/docker/dockerode-engine.ts',
  ImageBuilder: 'runners/docker/images.ts',
  PostureStore: 'runners/docker/posture-store.ts',
  JsonlAuditLog: 'permissions/audit/writer.ts',
  PermissionEngine: 'permissions/engine.ts',
  PolicySnapshotStore: 'permissions/policy-snapshot.ts',
  OneUseGrantStore: 'permissions/one-use-grants.ts',
  StateKey: 'project/state-key.ts',
  Registry: 'registry/registry.ts',
  ScanIndex: 'registry/scan-index.ts',
};

/**
 * Inside one runner's own folder, a part that assembles others: the engine pool makes a runner per engine it
 * is given (and the busybox image on each), and a DockerRunner a library caller builds bare connects its one
 * engine. Both are given their engines by runtime/; what they add is their own composition.
 */
const ASSEMBLES: Record<string, readonly string[]> = {
  'runners/docker/engine-pool.ts': ['DockerRunner', 'SwarmRunner', 'ImageBuilder'],
  'runners/docker/runner.ts': ['DockerodeEngine', 'ImageBuilder'],
};

/** `new X(` of an I/O part in one src file (path relative to src/), outside runtime/ and X's own file. */
function constructsOutsideRuntime(file: string, text: string): string[] {
  if (file.startsWith('runtime/')) return [];
  const found: string[] = [];
  for (const m of code(text).matchAll(/\bnew\s+([A-Z]\w*)\s*[(<]/g)) {
    const name = m[1] as string;
    const home = IO_PARTS[name];
    if (home === undefined || home === file || ASSEMBLES[file]?.includes(name) === true) continue;
    found.push(`${file}: new ${name}(`);
  }
  return found;
}

describe('architecture: only runtime/ meets I/O with `new`', () => {
  const files = sourceFiles(SRC).map((f) => ({
    file: path.relative(SRC, f),
    text: readFileSync(f, 'utf8'),
  }));

  it('every I/O part is a class its file exports, and every runner is an I/O part', () => {
    const missing = Object.entries(IO_PARTS).filter(
      ([name, file]) =>
        !new RegExp(`export class ${name}\\b`).test(files.find((f) => f.file === file)?.text ?? ''),
    );
    expect(missing).toEqual([]);
    const runners = files.flatMap((f) =>
      [...f.text.matchAll(/export class (\w+)[^{]*\bimplements\b[^{]*\bRunner\b/g)].map(
        (m) => m[1] as string,
      ),
    );
    expect(runners.length).toBeGreaterThan(0);
    expect(runners.filter((r) => IO_PARTS[r] === undefined)).toEqual([]);
  });

  it('no file outside src/runtime/ constructs one (its own file may: static factories)', () => {
    expect(files.flatMap((f) => constructsOutsideRuntime(f.file, f.text))).toEqual([]);
  });

  it('every allowed assembly is still used (a stale allowance fails)', () => {
    const stale = Object.entries(ASSEMBLES).flatMap(([file, names]) => {
      const text = code(files.find((f) => f.file === file)?.text ?? '');
      return names
        .filter((n) => !new RegExp(`\\bnew\\s+${n}\\s*[(<]`).test(text))
        .map((n) => `${file}: ${n}`);
    });
    expect(stale).toEqual([]);
  });

  it('the check sees a construction (the test itself can fail)', () => {
    expect(
      constructsOutsideRuntime('cli/commands/x.ts', 'const log = new JsonlAuditLog(file, clock);'),
    ).toEqual(['cli/commands/x.ts: new JsonlAuditLog(']);
    expect(
      constructsOutsideRuntime('permissions/x.ts', 'const k = new  StateKey ({ stateDir });'),
    ).toHaveLength(1);
    // runtime/, the class's own file, a comment and a class off the list are not constructions to refuse.
    expect(constructsOutsideRuntime('runtime/x.ts', 'new JsonlAuditLog(f, c);')).toEqual([]);
    expect(constructsOutsideRuntime('permissions/audit/writer.ts', 'new JsonlAuditLog(f, c);')).toEqual([]);
    expect(constructsOutsideRuntime('cli/x.ts', '// new JsonlAuditLog(f, c)\nnew Map();')).toEqual([]);
  });
});

/**
 * Files (src-relative) that could make a runner permit: they name the minting function, or reach the permit
 * module whole (a namespace or dynamic import) where a name need not be written. Only src/executor/ may.
 */
function permitMinters(files: ReadonlyMap<string, string>): string[] {
  const whole =
    /import\s+\*\s+as\s+\w+\s+from\s+['"][^'"]*\/permit\.js['"]|import\(\s*['"][^'"]*\/permit\.js['"]\s*\)/;
  return [...files]
    .filter(([f]) => !f.startsWith('executor/') && f !== 'runners/permit.ts')
    .filter(([, text]) => /\bmintRunnerPermit\b/.test(code(text)) || whole.test(code(text)))
    .map(([f]) => f);
}

/** Files (src-relative) that run a raw Wasm module: only the Wasm runner itself and the one ungated run. */
function rawRunners(files: ReadonlyMap<string, string>): string[] {
  return [...files]
    .filter(([f]) => !f.startsWith('runners/wasm/') && f !== 'runtime/ungated-module.ts')
    .filter(([, text]) => /\.runRaw\s*\(/.test(code(text)))
    .map(([f]) => f);
}

describe('architecture: only the executor can run a capability', () => {
  const files = new Map(
    sourceFiles(SRC).map((f) => [path.relative(SRC, f), readFileSync(f, 'utf8')] as const),
  );

  it('no module of src/ but the executor mints a runner permit (src/runners/permit.ts)', () => {
    expect(permitMinters(files)).toEqual([]);
    // The executor does mint: the check looks where the minting happens.
    expect(/\bmintRunnerPermit\(/.test(files.get('executor/executor.ts') ?? '')).toBe(true);
  });

  it('the minting check finds a minter (the test itself can fail)', () => {
    const sample = new Map([
      ['runners/shell-runner.ts', "import { redeemPermit } from './permit.js';"],
      ['executor/executor.ts', "import { mintRunnerPermit } from '../runners/permit.js';"],
      ['tools/run-capability.ts', "import { mintRunnerPermit } from '../runners/permit.js';"],
      ['agent/sneaky.ts', "import * as permits from '../runners/permit.js';"],
      ['cli/lazy.ts', "const p = await import('../runners/permit.js');"],
      ['mcp/commented.ts', '// never mintRunnerPermit here'],
    ]);
    expect(permitMinters(sample)).toEqual(['tools/run-capability.ts', 'agent/sneaky.ts', 'cli/lazy.ts']);
  });

  it('a raw Wasm module runs only in the Wasm runner and the one ungated run (src/runtime/ungated-module.ts)', () => {
    expect(rawRunners(files)).toEqual([]);
    expect(
      rawRunners(
        new Map([
          ['runtime/ungated-module.ts', 'await runner.runRaw({ file });'],
          ['cli/commands/wasm-run.ts', 'await runner.runRaw({ file });'],
        ]),
      ),
    ).toEqual(['cli/commands/wasm-run.ts']);
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

/*
 * No room too big to read: a source file holds at most MAX_FILE_LINES lines and a function at most
 * MAX_FUNCTION_LINES (a function's lines include the functions written inside it, so a long factory
 * cannot hide its body in closures). A concept that needs more gets a folder with a file per seam.
 */
const MAX_FILE_LINES = 800;
const MAX_FUNCTION_LINES = 150;

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
  const files = sourceFiles(SRC).map((f) => ({
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
