import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/*
 * Every package in package.json earns its place: it is imported somewhere capsule's own code lives, or it is a
 * command the project runs. A package nothing uses is weight in every install and a supply-chain risk for
 * nothing, so removing its last import must also remove it from package.json.
 */

/** Where capsule's code and tooling live: these imports count. */
const CODE_DIRS = ['src', 'test', 'scripts', 'bench'];
const CODE_FILES = ['vitest.config.ts', 'eslint.config.js'];
const CODE_EXT = /\.(?:ts|mts|cts|js|mjs|cjs)$/;

/** Where the project runs commands: a binary-only package must be named as a command in one of these. */
const COMMAND_FILES = ['.ci/run'];
const COMMAND_DIR_SCRIPTS = { dir: 'scripts', ext: '.sh' };

/**
 * Packages used only as commands, never imported, each with the command it gives and why it is here.
 * The command must still appear in package.json's scripts, .ci/run or scripts/*.sh.
 */
const BINARY_ONLY: Record<string, { command: string; why: string }> = {
  typescript: {
    command: 'tsc',
    why: 'compiles src/ to dist/ (npm run build) and type-checks (npm run typecheck)',
  },
  prettier: { command: 'prettier', why: 'the formatter behind npm run format and format:check' },
  eslint: { command: 'eslint', why: 'the linter behind npm run lint (its config imports only the plugins)' },
  vitest: { command: 'vitest', why: 'the test runner behind npm run test:unit and test:integration' },
};

// import … from 'x', export … from 'x', import 'x', import('x'), require('x'), require.resolve('x/file') and
// import.meta.resolve('x'); only specifiers that are not relative.
const IMPORT =
  /(?:^|[\n;])\s*(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\sfrom\s+)?['"]([^'".][^'"]*)['"]|\b(?:import|require|require\.resolve|import\.meta\.resolve)\(\s*['"]([^'".][^'"]*)['"]\s*\)/g;

interface PackageJson {
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  scripts?: Record<string, string>;
}

/** 'node:fs' → 'node:', '@scope/pkg/sub' → '@scope/pkg', 'pkg/sub' → 'pkg'. */
function packageOf(specifier: string): string {
  if (specifier.startsWith('node:')) return 'node:';
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] as string);
}

/** The packages a source text imports (static, type-only, dynamic and require alike). */
function importedPackages(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(IMPORT)) out.add(packageOf((m[1] ?? m[2]) as string));
  return out;
}

/**
 * The packages of `pkg` that nothing uses: not imported by any of `sources`, not a type package for an imported
 * one (`@types/x` for `x`, `@types/node` for any `node:` import), and not a binary-only package whose command
 * appears in `commandText`.
 */
function unusedDependencies(
  pkg: PackageJson,
  sources: readonly string[],
  commandText: string,
  binaryOnly: Record<string, { command: string }> = BINARY_ONLY,
): string[] {
  const imported = new Set<string>();
  for (const text of sources) for (const p of importedPackages(text)) imported.add(p);
  const typesFor = (name: string): string | undefined => {
    if (!name.startsWith('@types/')) return undefined;
    const bare = name.slice('@types/'.length);
    if (bare === 'node') return 'node:';
    // @types/scope__pkg is the types of @scope/pkg
    return bare.includes('__') ? `@${bare.replace('__', '/')}` : bare;
  };
  const command = (name: string): boolean => {
    const bin = binaryOnly[name]?.command;
    return (
      bin !== undefined &&
      new RegExp(`(?:^|[\\s;&|(])(?:npx\\s+)?${bin}(?=[\\s;&|)]|$)`, 'm').test(commandText)
    );
  };
  const names = [...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.devDependencies ?? {})];
  return names.filter((name) => {
    const typed = typesFor(name);
    if (typed !== undefined) return !imported.has(typed);
    return !imported.has(name) && !command(name);
  });
}

function codeFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) codeFiles(p, out);
    else if (CODE_EXT.test(entry.name)) out.push(p);
  }
  return out;
}

function projectSources(): string[] {
  const files = [
    ...CODE_DIRS.flatMap((d) => codeFiles(path.resolve(d))),
    ...CODE_FILES.map((f) => path.resolve(f)),
  ];
  return files.map((f) => readFileSync(f, 'utf8'));
}

function projectCommands(pkg: PackageJson): string {
  const shell = readdirSync(path.resolve(COMMAND_DIR_SCRIPTS.dir))
    .filter((f) => f.endsWith(COMMAND_DIR_SCRIPTS.ext))
    .map((f) => path.join(COMMAND_DIR_SCRIPTS.dir, f));
  const texts = [...COMMAND_FILES, ...shell].filter((f) => existsSync(f)).map((f) => readFileSync(f, 'utf8'));
  return [...Object.values(pkg.scripts ?? {}), ...texts].join('\n');
}

const PKG = JSON.parse(readFileSync(path.resolve('package.json'), 'utf8')) as PackageJson;

describe('dependencies', () => {
  it('every dependency and devDependency in package.json is imported somewhere, or is a command the project runs', () => {
    expect(unusedDependencies(PKG, projectSources(), projectCommands(PKG))).toEqual([]);
  });

  it('each binary-only package is in package.json and its command is still run somewhere', () => {
    const commands = projectCommands(PKG);
    const declared = { ...PKG.dependencies, ...PKG.devDependencies };
    for (const [name, { command }] of Object.entries(BINARY_ONLY)) {
      expect(declared[name], name).toBeDefined();
      expect(unusedDependencies({ devDependencies: { [name]: '*' } }, [], commands), command).toEqual([]);
    }
  });

  it('control: the check fails for a package nothing imports, and for a command nothing runs', () => {
    const pkg: PackageJson = {
      dependencies: { used: '1', '@scope/used': '1', unused: '1' },
      devDependencies: { '@types/used': '1', '@types/node': '1', '@types/gone': '1', tool: '1', idle: '1' },
    };
    const sources = [
      "import { a } from 'used/sub';\nimport type { B } from \"@scope/used\";\nconst fs = await import('node:fs');",
    ];
    const binaries = { tool: { command: 'tool' }, idle: { command: 'idle' } };
    expect(unusedDependencies(pkg, sources, 'tool --check .', binaries)).toEqual([
      'unused',
      '@types/gone',
      'idle',
    ]);
    // the same package counts once it is required, or once its command runs
    expect(
      unusedDependencies(
        pkg,
        [...sources, "require.resolve('unused/x.wasm')", "import 'gone'"],
        'tool; npx idle x',
        binaries,
      ),
    ).toEqual([]);
  });

  it('control: the real package.json with one more package nothing imports is caught', () => {
    const pkg = { ...PKG, devDependencies: { ...PKG.devDependencies, 'left-pad': '^1.3.0' } };
    expect(unusedDependencies(pkg, projectSources(), projectCommands(pkg))).toEqual(['left-pad']);
  });
});
