/**
 * preview1's process functions of one call: its argv and environment, random bytes, exit, and the
 * sockets it has none of.
 *
 * Self-contained (only `node:` imports and siblings that have only those): the worker loads it.
 */
import { randomFillSync } from 'node:crypto';
import { E } from './abi.js';
import { Preview1Exit, type Preview1Function } from './call.js';

/** The environment as preview1 hands it over: `NAME=value` strings. */
const environ = (env: Readonly<Record<string, string>>): string[] =>
  Object.entries(env).map(([k, v]) => `${k}=${v}`);

export const PROC_FUNCTIONS: Record<string, Preview1Function> = {
  args_sizes_get: (c, argc: number, size: number) => c.putSizes(c.options.args, argc, size),
  args_get: (c, argv: number, buf: number) => c.putStrings(c.options.args, argv, buf),
  environ_sizes_get: (c, count: number, size: number) => c.putSizes(environ(c.options.env), count, size),
  environ_get: (c, ptrs: number, buf: number) => c.putStrings(environ(c.options.env), ptrs, buf),
  random_get: (c, ptr: number, len: number) => {
    randomFillSync(c.bytes(ptr, len));
    return E.SUCCESS;
  },
  sched_yield: () => E.SUCCESS,
  proc_exit: (c, code: number): never => {
    throw new Preview1Exit(code >>> 0);
  },
  proc_raise: () => E.NOSYS,
  sock_accept: (c, fd: number) => (c.entry(fd), E.NOTSOCK),
  sock_recv: (c, fd: number) => (c.entry(fd), E.NOTSOCK),
  sock_send: (c, fd: number) => (c.entry(fd), E.NOTSOCK),
  sock_shutdown: (c, fd: number) => (c.entry(fd), E.NOTSOCK),
};
