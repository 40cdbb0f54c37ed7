/**
 * Red-team regression tests for the Wasm worker reusing a module's linear memory
 * between calls (MemorySlot in worker.ts, memoryFromHost in binary.ts). Each attack is a hostile
 * guest that leaves a secret behind in one call (returning, trapping, exiting, hitting the output
 * cap, timing out, growing, using bulk-memory ops) and a later call of the same code that scans
 * all of its memory for it. Judged by effect: what the later call prints (or its exit code).
 *
 * The "detector" tests at the bottom show the scanners would catch a memory handed over unzeroed:
 * they instantiate the very module capsule would run, rewritten by capMemory + memoryFromHost,
 * with one memory passed twice without fill(0) — and the scan sees the secret.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import wabtInit from 'wabt';
import { capMemory, memoryFromHost } from '../../../src/runners/wasm/binary.js';
import { componentizeJs } from '../../../src/runners/wasm/componentize.js';
import { TRAP_EXIT_CODE } from '../../../src/runners/wasm/protocol.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import type { WasmRunSpec } from '../../../src/runners/wasm/wasm-runner.js';
import { webAssembly } from '../../../src/runners/wasm/wasm-types.js';
import { rawSpec } from '../runners/wasm/helpers.js';
import type { WasmMemory, WasmModule } from '../../../src/runners/wasm/wasm-types.js';

const WA = webAssembly();

const wabt = await wabtInit();
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

function wat(name: string, source: string, features: Record<string, boolean> = {}): Uint8Array {
  return wabt.parseWat(name, source, features).toBinary({}).buffer;
}

// The output cap is 64 KiB here: the scanners' reports are short, a flood is cut early.
const spec = (
  file: string,
  bytes: Uint8Array,
  input: string,
  extra: Partial<WasmRunSpec> = {},
): WasmRunSpec => rawSpec(file, bytes, input, { outputBytes: 64 * 1024, ...extra });

// ------------------------------------------------------------------ the scanner module (preview1)
// Layout: [0, 256) scratch (iovecs at 0, counts at 8, stdin at 16..48, report at 64..128);
// everything from 256 to the end of memory must read 0 at the start of a call (no data segments
// are active there). The report: "nz=<nonzero bytes in [256,end)> p=<pages> g=<global>\n".
// stdin picks what it does after reporting; every action first leaves SECRET bytes (0x5a) behind.
const SCAN_BODY = `
  (global $g (mut i32) (i32.const 7))
  (data $p "SECRETSECRETSECR")
  (func $end (result i32) (i32.mul (memory.size) (i32.const 65536)))
  (func $scan (result i32)
    (local $i i32) (local $e i32) (local $n i32)
    (local.set $i (i32.const 256))
    (local.set $e (call $end))
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $e)))
      (if (i32.load8_u (local.get $i)) (then (local.set $n (i32.add (local.get $n) (i32.const 1)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (local.get $n))
  ;; 10 zero-padded decimal digits of $v at $at
  (func $digits (param $at i32) (param $v i32)
    (local $k i32)
    (local.set $k (i32.const 9))
    (loop $l
      (i32.store8 (i32.add (local.get $at) (local.get $k))
        (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (local.set $k (i32.sub (local.get $k) (i32.const 1)))
      (br_if $l (i32.ge_s (local.get $k) (i32.const 0)))))
  (func $put (param $at i32) (param $s i32) (param $n i32)
    (local $k i32)
    (block $d (loop $l
      (br_if $d (i32.ge_u (local.get $k) (local.get $n)))
      (i32.store8 (i32.add (local.get $at) (local.get $k))
        (i32.load8_u (i32.add (local.get $s) (local.get $k))))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br $l))))
  (func $report
    ;; "nz=" at 64, digits 67..77, " p=" 77..80, digits 80..90, " g=" 90..93, digits 93..103, "\\n" 103
    (i32.store8 (i32.const 64) (i32.const 110)) (i32.store8 (i32.const 65) (i32.const 122)) (i32.store8 (i32.const 66) (i32.const 61))
    (call $digits (i32.const 67) (call $scan))
    (i32.store8 (i32.const 77) (i32.const 32)) (i32.store8 (i32.const 78) (i32.const 112)) (i32.store8 (i32.const 79) (i32.const 61))
    (call $digits (i32.const 80) (memory.size))
    (i32.store8 (i32.const 90) (i32.const 32)) (i32.store8 (i32.const 91) (i32.const 103)) (i32.store8 (i32.const 92) (i32.const 61))
    (call $digits (i32.const 93) (global.get $g))
    (i32.store8 (i32.const 103) (i32.const 10))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 40))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  ;; SECRET: 0x5a over [256, end) by plain stores, and the global changed
  (func $secret
    (local $i i32) (local $e i32)
    (local.set $i (i32.const 256))
    (local.set $e (call $end))
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $e)))
      (i32.store8 (local.get $i) (i32.const 0x5a))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (global.set $g (i32.const 99)))
  (func (export "_start")
    (local $a i32)
    (call $report)
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 1))
    (i32.store8 (i32.const 16) (i32.const 0))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (local.set $a (i32.load8_u (i32.const 16)))
    ;; n: nothing
    (if (i32.eq (local.get $a) (i32.const 110)) (then (return)))
    ;; f: bulk memory.fill + memory.copy (no plain stores)
    (if (i32.eq (local.get $a) (i32.const 102)) (then
      (memory.fill (i32.const 256) (i32.const 0x5a) (i32.sub (call $end) (i32.const 256)))
      (memory.copy (i32.const 300) (i32.sub (call $end) (i32.const 2000)) (i32.const 1000))
      (global.set $g (i32.const 99))
      (return)))
    ;; i: passive data segment copied high with memory.init, then dropped
    (if (i32.eq (local.get $a) (i32.const 105)) (then
      (memory.init $p (i32.sub (call $end) (i32.const 16)) (i32.const 0) (i32.const 16))
      (memory.init $p (i32.const 70000) (i32.const 0) (i32.const 16))
      (memory.init $p (i32.const 256) (i32.const 0) (i32.const 16))
      (data.drop $p)
      (return)))
    ;; c: grow page by page until refused, report the pages reached, secret, return
    (if (i32.eq (local.get $a) (i32.const 99)) (then
      (block $d (loop $l
        (br_if $d (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
        (br $l)))
      (call $report)
      (call $secret)
      (return)))
    ;; C: one grow far past any cap (4 GiB worth), report
    (if (i32.eq (local.get $a) (i32.const 67)) (then
      (drop (memory.grow (i32.const 65535)))
      (call $report)
      (return)))
    (call $secret)
    ;; w: return normally
    (if (i32.eq (local.get $a) (i32.const 119)) (then (return)))
    ;; t: trap
    (if (i32.eq (local.get $a) (i32.const 116)) (then unreachable))
    ;; x: proc_exit(3)
    (if (i32.eq (local.get $a) (i32.const 120)) (then (call $proc_exit (i32.const 3))))
    ;; o: write until the output cap stops it (iovec over the secret region)
    (if (i32.eq (local.get $a) (i32.const 111)) (then
      (i32.store (i32.const 0) (i32.const 256))
      (i32.store (i32.const 4) (i32.const 4096))
      (loop $l (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))) (br $l))))
    ;; l: spin until the wall-clock limit kills the worker
    (if (i32.eq (local.get $a) (i32.const 108)) (then (loop $l (br $l))))
    ;; z: memory.grow 0 (detaches the buffer, same size), then the secret again
    (if (i32.eq (local.get $a) (i32.const 122)) (then
      (drop (memory.grow (i32.const 0)))
      (call $secret)
      (return)))
    ;; G: grow by one page, secret over all of it, trap
    (if (i32.eq (local.get $a) (i32.const 71)) (then
      (drop (memory.grow (i32.const 1)))
      (call $secret)
      unreachable))
    )`;

function scanner(memoryDecl: string, name = 'scan'): Uint8Array {
  return wat(
    `${name}.wat`,
    `(module
      (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
      ${memoryDecl}
      ${SCAN_BODY})`,
    { bulk_memory: true, threads: true },
  );
}

const pad = (n: number): string => String(n).padStart(10, '0');
const clean = (pages: number): string => `nz=${pad(0)} p=${pad(pages)} g=${pad(7)}\n`;

// One worker: every call lands in the same thread, so the same MemorySlot serves all of them.
const runner = new WasmRunner({ poolSize: 1 });
afterAll(() => runner.close());

describe('redteam: a reused memory carries nothing between preview1 calls', () => {
  const bytes = scanner('(memory (export "memory") 2 100)');
  const run = (input: string, extra: Partial<WasmRunSpec> = {}) =>
    runner.runRaw(spec('scan.wasm', bytes, input, extra));
  const firstLine = (b: Uint8Array): string => text(b).slice(0, 40);

  it('the scanner starts clean', async () => {
    const r = await run('n');
    expect(text(r.stdout)).toBe(clean(2));
    expect(r.exitCode).toBe(0);
  });

  // Each attack leaves SECRET over all of memory (and g=99), ends its own way, and the next
  // call of the same module on the same worker must see a memory that is all zero, 2 pages, g=7.
  const attacks: Array<
    [string, string, (r: Awaited<ReturnType<typeof run>>) => void, Partial<WasmRunSpec>?]
  > = [
    ['returns normally', 'w', (r) => expect(r.exitCode).toBe(0)],
    ['traps', 't', (r) => expect(r.exitCode).toBe(TRAP_EXIT_CODE)],
    ['exits through proc_exit', 'x', (r) => expect(r.exitCode).toBe(3)],
    ['hits the output cap', 'o', (r) => expect(r.truncated).toBe(true)],
    ['is killed at its time limit', 'l', (r) => expect(r.timedOut).toBe(true), { timeoutMs: 400 }],
    ['grows by 0 pages (buffer detached, same size)', 'z', (r) => expect(r.exitCode).toBe(0)],
    ['grows by one page and traps', 'G', (r) => expect(r.exitCode).toBe(TRAP_EXIT_CODE)],
    ['writes with memory.fill and memory.copy only', 'f', (r) => expect(r.exitCode).toBe(0)],
  ];
  for (const [what, action, check, extra] of attacks) {
    it(`a call that leaves a secret and ${what}: the next call sees none of it`, async () => {
      for (let i = 0; i < 3; i++) {
        const bad = await run(action, extra);
        // A call killed at its time limit returns no output (the worker is terminated).
        if (action !== 'l') expect(firstLine(bad.stdout), `attack ${i}`).toBe(clean(2));
        check(bad);
        const next = await run('n');
        expect(text(next.stdout), `after attack ${i}`).toBe(clean(2));
      }
    });
  }

  it('a passive data segment copied high with memory.init is gone in the next call', async () => {
    const bad = await run('i');
    expect(text(bad.stdout)).toBe(clean(2));
    expect(text((await run('n')).stdout)).toBe(clean(2));
  });

  it('the same secret never shows up after a long mixed sequence of endings', async () => {
    const seq = ['w', 'z', 't', 'x', 'f', 'i', 'G', 'o', 'w', 'c', 'C', 'x'];
    for (const a of seq) {
      const r = await run(a);
      expect(firstLine(r.stdout), `before ${a}`).toBe(clean(2));
    }
  });
});

describe('redteam: the memory cap still holds for a supplied memory', () => {
  // Declared maximum (1000 pages, 62.5 MiB) above a 1 MiB cap (16 pages): grow stops at the cap.
  const bytes = scanner('(memory (export "memory") 2 1000)', 'cap');
  const reached = (b: Uint8Array): string => text(b).split('\n')[1] ?? '';

  it('page-by-page growth stops at limits.memoryMb, also after calls under a larger cap', async () => {
    for (const mb of [1, 64, 1, 2, 64, 1]) {
      const r = await runner.runRaw(spec('cap.wasm', bytes, 'c', { memoryMb: mb }));
      expect(text(r.stdout).slice(0, 40), `memoryMb ${mb}`).toBe(clean(2));
      const cap = Math.min(1000, mb * 16);
      expect(reached(r.stdout), `memoryMb ${mb}`).toBe(`nz=${pad(0)} p=${pad(cap)} g=${pad(7)}`);
    }
  });

  it('one huge grow is refused under the cap and leaves the memory at its initial size', async () => {
    for (const mb of [1, 64]) {
      const r = await runner.runRaw(spec('cap.wasm', bytes, 'C', { memoryMb: mb }));
      expect(reached(r.stdout)).toBe(`nz=${pad(0)} p=${pad(2)} g=${pad(7)}`);
    }
  });

  it('a declared maximum below the cap is kept (growth stops there)', async () => {
    const small = scanner('(memory (export "memory") 2 5)', 'small-max');
    for (let i = 0; i < 2; i++) {
      const r = await runner.runRaw(spec('small-max.wasm', small, 'c', { memoryMb: 64 }));
      expect(reached(r.stdout)).toBe(`nz=${pad(0)} p=${pad(5)} g=${pad(7)}`);
    }
  });

  it('an unbounded declared memory gets the cap as its maximum', async () => {
    const unbounded = scanner('(memory (export "memory") 2)', 'unbounded');
    for (let i = 0; i < 2; i++) {
      const r = await runner.runRaw(spec('unbounded.wasm', unbounded, 'c', { memoryMb: 1 }));
      expect(text(r.stdout).slice(0, 40)).toBe(clean(2));
      expect(reached(r.stdout)).toBe(`nz=${pad(0)} p=${pad(16)} g=${pad(7)}`);
    }
  });

  it('an initial size above the cap is still refused before it runs', async () => {
    const big = scanner('(memory (export "memory") 20 100)', 'big-initial');
    await expect(runner.runRaw(spec('big-initial.wasm', big, 'n', { memoryMb: 1 }))).rejects.toThrow(
      /more than the cap/,
    );
  });
});

// Modules that cannot print (no exported "memory" for the WASI host, or no imports at all) report
// by how they end: each scans its whole memory first and, only if it is all zero, leaves a secret
// behind. A memory handed over unzeroed would change how the second call ends.
const SCAN_ALL = `
  (func $dirty (result i32)
    (local $i i32) (local $e i32)
    (local.set $e (i32.mul (memory.size) (i32.const 65536)))
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $e)))
      (if (i32.load8_u (local.get $i)) (then (return (i32.const 1))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (i32.const 0))
  (func $fill (memory.fill (i32.const 0) (i32.const 0x5a) (i32.mul (memory.size) (i32.const 65536))))`;

describe('redteam: modules the rewrite treats differently still get a zeroed memory', () => {
  it('memory exported under another name: every call exits 10 (a leftover would make it 11)', async () => {
    const bytes = wat(
      'renamed.wat',
      `(module
        (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
        (memory (export "heap") 2 100)
        ${SCAN_ALL}
        (func (export "_start")
          (if (call $dirty) (then (call $exit (i32.const 11))))
          (call $fill)
          (call $exit (i32.const 10))))`,
    );
    for (let i = 0; i < 4; i++) {
      const r = await runner.runRaw(spec('renamed.wasm', bytes, ''));
      expect(r.exitCode, `call ${i}`).toBe(10);
    }
  });

  it('memory not exported at all, ending in a trap: every call traps (a leftover would make it exit 11)', async () => {
    const bytes = wat(
      'hidden.wat',
      `(module
        (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
        (memory 2 100)
        ${SCAN_ALL}
        (func (export "_start")
          (if (call $dirty) (then (call $exit (i32.const 11))))
          (call $fill)
          unreachable))`,
    );
    for (let i = 0; i < 4; i++) {
      const r = await runner.runRaw(spec('hidden.wasm', bytes, ''));
      expect(r.exitCode, `call ${i}`).toBe(TRAP_EXIT_CODE);
    }
  });

  it('a module with no import section at all: every call traps (a leftover would make it return 0)', async () => {
    const bytes = wat(
      'no-imports.wat',
      `(module
        (memory 1 10)
        ${SCAN_ALL}
        (func (export "_start")
          (if (call $dirty) (then (return)))
          (call $fill)
          unreachable))`,
    );
    expect(memoryFromHost(bytes, 'no-imports.wasm')).toBeDefined();
    for (let i = 0; i < 4; i++) {
      const r = await runner.runRaw(spec('no-imports.wasm', bytes, ''));
      expect(r.exitCode, `call ${i}`).toBe(TRAP_EXIT_CODE);
    }
  });

  it('a start function that leaves a secret and traps while instantiating: _start never runs in any call', async () => {
    const bytes = wat(
      'start-trap.wat',
      `(module
        (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
        (memory (export "memory") 1 10)
        (data (i32.const 0) "LEAK\\n")
        (func $dirty (result i32)
          (local $i i32)
          (local.set $i (i32.const 16))
          (block $done (loop $l
            (br_if $done (i32.ge_u (local.get $i) (i32.const 65536)))
            (if (i32.load8_u (local.get $i)) (then (return (i32.const 1))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $l)))
          (i32.const 0))
        (func $s
          (if (call $dirty) (then (return)))
          (memory.fill (i32.const 16) (i32.const 0x5a) (i32.sub (i32.const 65536) (i32.const 16)))
          unreachable)
        (start $s)
        (func (export "_start")
          (i32.store (i32.const 8) (i32.const 0))
          (i32.store (i32.const 12) (i32.const 5))
          (drop (call $w (i32.const 1) (i32.const 8) (i32.const 1) (i32.const 8)))))`,
    );
    for (let i = 0; i < 4; i++) {
      const r = await runner.runRaw(spec('start-trap.wasm', bytes, ''));
      expect(text(r.stdout), `call ${i}`).toBe('');
      expect(r.exitCode, `call ${i}`).toBe(TRAP_EXIT_CODE);
    }
  });

  it('custom sections before and between every section: the rewrite still yields a clean memory each call', async () => {
    const plain = scanner('(memory (export "memory") 2 100)', 'customs');
    const custom = (name: string): Buffer => {
      const body = Buffer.concat([Buffer.from([name.length]), Buffer.from(name), Buffer.from('x'.repeat(7))]);
      return Buffer.concat([Buffer.from([0, body.length]), body]);
    };
    const pieces: Buffer[] = [Buffer.from(plain.subarray(0, 8)), custom('first')];
    let pos = 8;
    while (pos < plain.length) {
      const start = pos;
      pos++;
      let size = 0;
      let shift = 0;
      for (;;) {
        const b = plain[pos++] as number;
        size |= (b & 0x7f) << shift;
        shift += 7;
        if ((b & 0x80) === 0) break;
      }
      pos += size;
      pieces.push(Buffer.from(plain.subarray(start, pos)), custom(`after${start}`));
    }
    const bytes = Buffer.concat(pieces);
    expect(memoryFromHost(bytes, 'customs.wasm')).toBeDefined();
    for (const a of ['w', 't', 'n', 'x', 'n']) {
      const r = await runner.runRaw(spec('customs.wasm', bytes, a));
      expect(text(r.stdout).slice(0, 40), `before ${a}`).toBe(clean(2));
    }
  });

  it('a shared memory (left to the module) is new each call', async () => {
    const bytes = scanner('(memory (export "memory") 2 100 shared)', 'shared');
    expect(
      memoryFromHost(capMemory(bytes, { file: 's', capPages: 1024, allowMemoryImport: false }).bytes, 's'),
    ).toBe(undefined);
    for (const a of ['w', 'n', 't', 'n', 'f', 'n']) {
      const r = await runner.runRaw(spec('shared.wasm', bytes, a));
      expect(text(r.stdout).slice(0, 40), `before ${a}`).toBe(clean(2));
    }
  });

  it('two memories (multi-memory): left alone; it either cannot start or starts clean every call', async () => {
    const bytes = wat(
      'multi.wat',
      `(module
        (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
        (memory $a (export "memory") 1 10)
        (memory $b 1 10)
        (func (export "_start")
          (if (i32.load8_u $b (i32.const 100)) (then (call $exit (i32.const 11))))
          (if (i32.load8_u $a (i32.const 100)) (then (call $exit (i32.const 12))))
          (i32.store8 $a (i32.const 100) (i32.const 0x5a))
          (i32.store8 $b (i32.const 100) (i32.const 0x5a))
          (call $exit (i32.const 10))))`,
      { multi_memory: true },
    );
    for (let i = 0; i < 3; i++) {
      let exit: number | null | 'refused';
      try {
        exit = (await runner.runRaw(spec('multi.wasm', bytes, ''))).exitCode;
      } catch {
        exit = 'refused';
      }
      expect(['refused', 10]).toContain(exit);
    }
  });
});

describe('redteam: modules that already use the host namespace are not rewritten and never run', () => {
  const cases: Array<[string, string]> = [
    ['a function named "memory"', '(import "capsule:host" "memory" (func $m))'],
    ['another function', '(import "capsule:host" "secret" (func $m))'],
    ['a global', '(import "capsule:host" "memory" (global $m i32))'],
    ['the memory itself', '(import "capsule:host" "memory" (memory 1 10))'],
  ];
  for (const [what, imp] of cases) {
    it(`a module importing ${what} from capsule:host is refused`, async () => {
      const bytes = wat(
        'host-ns.wat',
        `(module
          (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
          ${imp}
          ${imp.includes('(memory') ? '' : '(memory (export "memory") 1 10)'}
          (data (i32.const 16) "RAN\\n")
          (func (export "_start")
            (i32.store (i32.const 0) (i32.const 16))
            (i32.store (i32.const 4) (i32.const 4))
            (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`,
      );
      let out = '';
      await expect(
        runner.runRaw(spec(`host-ns-${what.length}.wasm`, bytes, '')).then((r) => {
          out = text(r.stdout);
        }),
      ).rejects.toThrow();
      expect(out).toBe('');
    });
  }
});

describe('redteam: two workers, interleaved concurrent calls of the same module', () => {
  const pool = new WasmRunner({ poolSize: 2 });
  afterAll(() => pool.close());
  const bytes = scanner('(memory (export "memory") 2 100)', 'pooled');

  it('forty concurrent calls, every other one leaving a secret, all start clean', async () => {
    const actions = ['w', 'n', 't', 'n', 'x', 'f', 'z', 'G', 'o', 'i'];
    const calls = Array.from({ length: 40 }, (_, i) => actions[i % actions.length] as string);
    const results = await Promise.all(calls.map((a) => pool.runRaw(spec('pooled.wasm', bytes, a))));
    results.forEach((r, i) => expect(text(r.stdout).slice(0, 40), `call ${i} (${calls[i]})`).toBe(clean(2)));
  });
});

describe('redteam: components (QuickJS) keep nothing in their reused memories', () => {
  // Reports what it starts with, then leaves state behind in globals and the heap and ends its
  // own way. A component's JS heap lives in the reused linear memory.
  const source = `
    let calls = 0;
    const kept = [];
    export function run(input) {
      calls += 1;
      const seen = JSON.stringify({ calls, secret: globalThis.secret ?? null, kept: kept.length });
      if (input === 'look') return seen;
      globalThis.secret = 'SECRET-' + 'x'.repeat(1000);
      for (let i = 0; i < 200; i++) kept.push({ i, s: 'SECRET' + i });
      if (input === 'throw') throw new Error('left state, then threw');
      if (input === 'spin') for (;;) {}
      if (input === 'oom') { const a = []; for (;;) a.push(new Array(100000).fill(2.5)); }
      if (input === 'flood') return 'F'.repeat(200000);
      if (input === 'recurse') { const f = (n) => f(n + 1) + 1; return String(f(0)); }
      return seen;
    }`;
  const fresh = '{"calls":1,"secret":null,"kept":0}';
  let component: Uint8Array;
  beforeAll(async () => {
    component = (await componentizeJs(source, { file: 'keeper.js' })).component;
  });
  const call = (r: WasmRunner, input: string, extra: Partial<WasmRunSpec> = {}) =>
    r.runRaw(spec('keeper.wasm', component, input, extra));

  it('every ending leaves nothing for the next call on the same worker', async () => {
    const endings: Array<[string, Partial<WasmRunSpec>]> = [
      ['keep', {}],
      ['throw', {}],
      ['flood', { outputBytes: 4096 }],
      ['recurse', {}],
      ['spin', { timeoutMs: 1500 }],
      ['oom', { memoryMb: 48 }],
      ['keep', {}],
    ];
    expect(text((await call(runner, 'look')).stdout)).toBe(fresh);
    for (const [input, extra] of endings) {
      const bad = await call(runner, input, extra);
      if (input === 'keep') expect(text(bad.stdout)).toBe(fresh);
      if (input === 'flood') expect(bad.truncated).toBe(true);
      if (input === 'spin') expect(bad.timedOut).toBe(true);
      if (input === 'oom') expect(bad.oomKilled).toBe(true);
      expect(text((await call(runner, 'look', extra)).stdout), `after ${input}`).toBe(fresh);
      expect(text((await call(runner, 'look')).stdout), `after ${input}`).toBe(fresh);
    }
  });

  it('interleaved concurrent calls on two workers all start fresh', async () => {
    const pool = new WasmRunner({ poolSize: 2 });
    try {
      const inputs = Array.from({ length: 24 }, (_, i) =>
        i % 3 === 0 ? 'throw' : i % 3 === 1 ? 'keep' : 'look',
      );
      const results = await Promise.all(inputs.map((input) => call(pool, input)));
      results.forEach((r, i) => {
        if (inputs[i] !== 'throw') expect(text(r.stdout), `call ${i} (${inputs[i]})`).toBe(fresh);
        else expect(r.exitCode).not.toBe(0);
      });
    } finally {
      await pool.close();
    }
  });
});

// ------------------------------------------------------------------ the scanners would catch it
// The module exactly as capsule runs it (capped, then its memory turned into a capsule:host import),
// instantiated here with a tiny preview1 stand-in. One memory handed to two instances WITHOUT the
// zeroing shows the secret to the second; with fill(0) in between (what MemorySlot does) it does not.
describe('redteam: the scanners detect a memory handed over unzeroed (proof the tests above can fail)', () => {
  class Exit extends Error {
    constructor(readonly code: number) {
      super(`exit ${code}`);
    }
  }
  function asCapsuleRuns(bytes: Uint8Array): {
    module: WasmModule;
    limits: { initial: number; maximum: number };
  } {
    const capped = capMemory(bytes, { file: 'x.wasm', capPages: 1024, allowMemoryImport: false });
    const hosted = memoryFromHost(capped.bytes, 'x.wasm');
    if (hosted === undefined) throw new Error('not rewritten');
    return { module: new WA.Module(hosted.bytes), limits: hosted.memory };
  }
  function runOnce(module: WasmModule, memory: WasmMemory, action: string): { out: string; exit: number } {
    let out = '';
    const view = () => new DataView(memory.buffer);
    const wasi = {
      fd_write: (_fd: number, iov: number, n: number, nw: number) => {
        let total = 0;
        for (let k = 0; k < n; k++) {
          const ptr = view().getUint32(iov + 8 * k, true);
          const len = view().getUint32(iov + 8 * k + 4, true);
          out += Buffer.from(new Uint8Array(memory.buffer, ptr, len)).toString('latin1');
          total += len;
        }
        view().setUint32(nw, total, true);
        return 0;
      },
      fd_read: (_fd: number, iov: number, _n: number, nr: number) => {
        const ptr = view().getUint32(iov, true);
        const b = Buffer.from(action);
        new Uint8Array(memory.buffer, ptr, b.length).set(b);
        view().setUint32(nr, b.length, true);
        return 0;
      },
      proc_exit: (code: number) => {
        throw new Exit(code);
      },
    };
    let exit = 0;
    try {
      const instance = new WA.Instance(module, {
        wasi_snapshot_preview1: wasi,
        'capsule:host': { memory },
      });
      (instance.exports._start as () => void)();
    } catch (err) {
      exit = err instanceof Exit ? err.code : TRAP_EXIT_CODE;
    }
    return { out, exit };
  }

  it('scanner: unzeroed reuse reports the secret; zeroed reuse does not', () => {
    const { module, limits } = asCapsuleRuns(scanner('(memory (export "memory") 2 100)'));
    for (const action of ['w', 't', 'x', 'f', 'i', 'z']) {
      const memory = new WA.Memory(limits);
      expect(runOnce(module, memory, action).out.slice(0, 40)).toBe(clean(2));
      expect(runOnce(module, memory, 'n').out, `unzeroed after ${action}`).not.toBe(clean(2));
      new Uint8Array(memory.buffer).fill(0);
      expect(runOnce(module, memory, 'n').out, `zeroed after ${action}`).toBe(clean(2));
    }
  });

  it('exit-code scanners: unzeroed reuse changes how the second call ends', () => {
    const hidden = asCapsuleRuns(
      wat(
        'hidden.wat',
        `(module
          (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
          (memory 2 100)
          ${SCAN_ALL}
          (func (export "_start")
            (if (call $dirty) (then (call $exit (i32.const 11))))
            (call $fill)
            unreachable))`,
      ),
    );
    const memory = new WA.Memory(hidden.limits);
    expect(runOnce(hidden.module, memory, '').exit).toBe(TRAP_EXIT_CODE);
    expect(runOnce(hidden.module, memory, '').exit).toBe(11);
  });
});
