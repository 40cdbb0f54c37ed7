#!/usr/bin/env node
// WASI preview1 conformance of the candidate implementations, on wasi-testsuite's prebuilt tests.
// The suite is NOT part of this repository: fetch it, extract its prod/testsuite-base branch somewhere
// outside the repo, and point --suite at its tests/ folder, e.g.
//   git -C wasi-testsuite archive prod/testsuite-base tests | tar -x -C /tmp/wasi-ts
//   npm run build && node scripts/wasm-conformance.mjs --suite /tmp/wasi-ts/tests node-wasi capsule
// Candidates: node-wasi, browser-wasi-shim, wasmer-wasi (npm install @wasmer/wasi in a folder outside the
// repo and set CONFORMANCE_DIR to it), capsule (`capsule wasm run` of the built CLI, as the suite's
// adapters run a runtime), capsule-runner (the built WasmRunner in-process). Each case runs in its own
// process with a 20 s limit; the summary gives passes per test category (the suite's source language).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const self = fileURLToPath(import.meta.url);
const repo = path.dirname(path.dirname(self));

async function runOne(cand, wasmPath, args, env, root) {
  const bytes = fs.readFileSync(wasmPath);
  const name = path.basename(wasmPath);
  const out = { stdout: [], stderr: [] };
  const dec = (a) => Buffer.concat(a.map((x) => Buffer.from(x))).toString('utf8');
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'wasi-conf-'));
  try {
    if (cand === 'node-wasi') {
      const { WASI } = await import('node:wasi');
      const o = fs.openSync(path.join(scratch, 'out'), 'w+');
      const e = fs.openSync(path.join(scratch, 'err'), 'w+');
      const w = new WASI({
        version: 'preview1',
        args: [name, ...args],
        env,
        preopens: root ? { '/': root } : {},
        stdout: o,
        stderr: e,
        returnOnExit: true,
      });
      const inst = await WebAssembly.instantiate(await WebAssembly.compile(bytes), w.getImportObject());
      let code;
      try {
        code = w.start(inst);
      } catch (err) {
        code = 'trap:' + err.message;
      }
      return {
        exit: code,
        stdout: fs.readFileSync(path.join(scratch, 'out'), 'utf8'),
        stderr: fs.readFileSync(path.join(scratch, 'err'), 'utf8'),
      };
    }
    if (cand === 'browser-wasi-shim') {
      const s = await import('@bjorn3/browser_wasi_shim');
      const load = (dir) => {
        const m = new Map();
        for (const ent of fs.readdirSync(dir, { withFileTypes: true })) {
          const p = path.join(dir, ent.name);
          if (ent.isDirectory()) m.set(ent.name, new s.Directory(load(p)));
          else if (ent.isFile()) m.set(ent.name, new s.File(fs.readFileSync(p)));
        }
        return m;
      };
      const fds = [
        new s.OpenFile(new s.File([])),
        new s.ConsoleStdout((b) => out.stdout.push(b)),
        new s.ConsoleStdout((b) => out.stderr.push(b)),
      ];
      if (root) fds.push(new s.PreopenDirectory('/', load(root)));
      const w = new s.WASI(
        [name, ...args],
        Object.entries(env).map(([k, v]) => `${k}=${v}`),
        fds,
      );
      const inst = await WebAssembly.instantiate(await WebAssembly.compile(bytes), {
        wasi_snapshot_preview1: w.wasiImport,
      });
      let code;
      try {
        code = w.start(inst);
      } catch (err) {
        code = 'trap:' + err.message;
      }
      return { exit: code, stdout: dec(out.stdout), stderr: dec(out.stderr) };
    }
    if (cand === 'wasmer-wasi') {
      // Not a capsule dependency: resolved from CONFORMANCE_DIR (a folder outside the repo with it installed).
      const req = createRequire(path.join(process.env.CONFORMANCE_DIR ?? repo, 'package.json'));
      const m = await import(pathToFileURL(req.resolve('@wasmer/wasi')).href);
      await m.init();
      const w = new m.WASI({ args: [name, ...args], env, preopens: root ? { '/': '/' } : {} });
      const copy = (dir, g) => {
        for (const ent of fs.readdirSync(dir, { withFileTypes: true })) {
          const p = path.join(dir, ent.name);
          const gp = g + '/' + ent.name;
          if (ent.isDirectory()) {
            w.fs.createDir(gp);
            copy(p, gp);
          } else if (ent.isFile()) w.fs.open(gp, { write: true, create: true }).write(fs.readFileSync(p));
        }
      };
      if (root) copy(root, '');
      let code;
      try {
        code = w.start(w.instantiate(await WebAssembly.compile(bytes), {}));
      } catch (err) {
        code = 'trap:' + err.message;
      }
      return { exit: code, stdout: w.getStdoutString(), stderr: w.getStderrString() };
    }
    if (cand === 'capsule') {
      // Through the built CLI, the way the suite's adapters run wasmtime: --env K=V, --dir ROOT::/, args.
      const argv = [path.join(repo, 'dist/cli/main.js'), 'wasm', 'run'];
      for (const [k, v] of Object.entries(env)) argv.push('--env', `${k}=${v}`);
      if (root) argv.push('--dir', `${root}::/`);
      argv.push('--timeout-ms', '15000', wasmPath, '--', ...args);
      const p = spawnSync(process.execPath, argv, {
        encoding: 'utf8',
        input: '',
        maxBuffer: 64 * 1024 * 1024,
      });
      return { exit: p.status === 134 ? 'trap' : p.status, stdout: p.stdout, stderr: p.stderr };
    }
    if (cand === 'capsule-runner') {
      const { WasmRunner } = await import(path.join(repo, 'dist/runners/wasm/wasm-runner.js'));
      const runner = new WasmRunner({ poolSize: 1 });
      try {
        const r = await runner.runRaw({
          file: wasmPath,
          bytes,
          programName: name,
          args,
          env,
          input: new Uint8Array(0),
          dirs: root ? [{ hostPath: root, guestPath: '/', mode: 'rw' }] : [],
          timeoutMs: 15000,
          memoryMb: 1024,
          outputBytes: 16 * 1024 * 1024,
        });
        return {
          exit: r.exitCode === 134 ? 'trap' : r.exitCode,
          stdout: Buffer.from(r.stdout).toString(),
          stderr: Buffer.from(r.stderr).toString(),
        };
      } finally {
        await runner.close();
      }
    }
    throw new Error('unknown candidate ' + cand);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--one') {
  const [cand, wasmPath, argsJson, envJson, root] = process.argv.slice(3);
  const r = await runOne(cand, wasmPath, JSON.parse(argsJson), JSON.parse(envJson), root).catch((err) => ({
    exit: 'error:' + err.message,
    stdout: '',
    stderr: '',
  }));
  process.stdout.write('\n@@RESULT@@' + JSON.stringify(r));
  process.exit(0);
}

const argv = process.argv.slice(2);
const at = argv.indexOf('--suite');
if (at < 0 || argv[at + 1] === undefined) {
  console.error(
    'usage: node scripts/wasm-conformance.mjs --suite <wasi-testsuite tests dir> [candidates...]',
  );
  process.exit(64);
}
const base = argv[at + 1];
const cands = argv.filter((_, i) => i !== at && i !== at + 1);
if (cands.length === 0)
  cands.push('node-wasi', 'browser-wasi-shim', 'wasmer-wasi', 'capsule', 'capsule-runner');
const suites = [
  'assemblyscript/testsuite/wasm32-wasip1',
  'c/testsuite/wasm32-wasip1',
  'rust/testsuite/wasm32-wasip1',
];
for (const cand of cands) {
  const res = { pass: 0, fail: 0, failed: [], byCategory: {} };
  for (const suite of suites) {
    const dir = path.join(base, suite);
    if (!fs.existsSync(dir)) continue;
    for (const f of fs
      .readdirSync(dir)
      .filter((x) => x.endsWith('.wasm'))
      .sort()) {
      const specPath = path.join(dir, f.replace(/\.wasm$/, '.json'));
      const spec = fs.existsSync(specPath) ? JSON.parse(fs.readFileSync(specPath, 'utf8')) : {};
      let run = { args: spec.args ?? [], env: spec.env ?? {}, root: spec.root ?? null };
      // As the suite's own runner: the exit code always, stdout/stderr only when the spec gives them.
      let expect = { exit_code: spec.exit_code ?? 0, stdout: spec.stdout, stderr: spec.stderr };
      if (spec.operations) {
        const r = spec.operations.find((o) => o.type === 'run') ?? {};
        const w = spec.operations.find((o) => o.type === 'wait') ?? {};
        run = { args: r.args ?? [], env: r.env ?? {}, root: r.root ?? null };
        expect = { exit_code: w.exit_code ?? 0 };
        for (const o of spec.operations.filter((o) => o.type === 'read'))
          expect[o.id ?? 'stdout'] = o.payload ?? '';
      }
      const work = fs.mkdtempSync(path.join(os.tmpdir(), 'wasi-conf-case-'));
      let root = '';
      if (run.root) {
        root = path.join(work, 'root');
        fs.cpSync(path.join(dir, run.root), root, { recursive: true });
      }
      const p = spawnSync(
        process.execPath,
        [self, '--one', cand, path.join(dir, f), JSON.stringify(run.args), JSON.stringify(run.env), root],
        { encoding: 'utf8', timeout: 20000 },
      );
      fs.rmSync(work, { recursive: true, force: true });
      const m = (p.stdout ?? '').split('@@RESULT@@')[1];
      let ok = false;
      let why = '';
      if (!m) why = `crash status=${p.status} signal=${p.signal}`;
      else {
        const r = JSON.parse(m);
        ok =
          r.exit === expect.exit_code &&
          (expect.stdout === undefined || r.stdout === expect.stdout) &&
          (expect.stderr === undefined || r.stderr === expect.stderr);
        if (!ok)
          why = `exit=${r.exit} want ${expect.exit_code}; ${String(r.stderr).slice(0, 160).replace(/\n/g, ' | ')}`;
      }
      const cat = (res.byCategory[suite.split('/')[0]] ??= { pass: 0, total: 0 });
      cat.total++;
      if (ok) cat.pass++;
      if (ok) res.pass++;
      else {
        res.fail++;
        res.failed.push(`${suite.split('/')[0]}/${f}: ${why}`);
      }
    }
  }
  console.log(`${cand}: ${res.pass} passed, ${res.fail} failed of ${res.pass + res.fail}`);
  for (const [cat, c] of Object.entries(res.byCategory)) console.log(`  ${cat}: ${c.pass}/${c.total}`);
  for (const f of res.failed) console.log(`  ${f}`);
}
