;; The bench's "shout" with Extism's own ABI (no WASI): the input through extism:host/env, upper-cased a-z,
;; set as the output. What a plugin written for Extism does, so its fresh-plugin call is Extism at its best.
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  ;; Extism's WASI set-up wants a memory of the plugin's own (the data lives in Extism's).
  (memory (export "memory") 1)
  (func (export "shout") (result i32)
    (local $n i64) (local $out i64) (local $i i64) (local $b i32)
    (local.set $n (call $input_length))
    (local.set $out (call $alloc (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (local.set $b (call $input_load_u8 (local.get $i)))
        (if (i32.and (i32.ge_u (local.get $b) (i32.const 97)) (i32.le_u (local.get $b) (i32.const 122)))
          (then (local.set $b (i32.sub (local.get $b) (i32.const 32)))))
        (call $store_u8 (i64.add (local.get $out) (local.get $i)) (local.get $b))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $next)))
    (call $output_set (local.get $out) (local.get $n))
    (i32.const 0)))
