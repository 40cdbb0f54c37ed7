;; shout-wasm: echoes its input document (stdin) back in upper case (ASCII a-z), like the shell
;; capability "shout", as a prebuilt WASI preview1 module.
;; Build: npx wat2wasm capabilities/shout-wasm/shout.wat -o capabilities/shout-wasm/shout.wasm
;;        (wat2wasm from the npm package "wabt"; or: node scripts/build-wasm-examples.mjs)
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 2)
  ;; 0: iovec {ptr, len}; 8: bytes read / written; 1024..66560: buffer
  (func (export "_start")
    (local $n i32) (local $i i32) (local $c i32) (local $err i32)
    (loop $chunk
      (i32.store (i32.const 0) (i32.const 1024))
      (i32.store (i32.const 4) (i32.const 65536))
      (local.set $err (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (if (local.get $err) (then (call $proc_exit (i32.const 1))))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.eqz (local.get $n)) (then (return)))
      (local.set $i (i32.const 0))
      (loop $byte
        (local.set $c (i32.load8_u (i32.add (i32.const 1024) (local.get $i))))
        (if (i32.and (i32.ge_u (local.get $c) (i32.const 97)) (i32.le_u (local.get $c) (i32.const 122)))
          (then (i32.store8 (i32.add (i32.const 1024) (local.get $i)) (i32.sub (local.get $c) (i32.const 32)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $byte (i32.lt_u (local.get $i) (local.get $n))))
      (i32.store (i32.const 4) (local.get $n))
      (local.set $err (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
      (if (local.get $err) (then (call $proc_exit (i32.const 1))))
      (br $chunk))))
