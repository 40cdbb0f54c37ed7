/**
 * The WASI preview2 host a component runs against: the one place its import object is built
 * (`preview2Imports`). Each interface the sandbox offers is one entry of that object, and
 * `PREVIEW2_INTERFACES` (protocol.ts) lists them; an interface not listed fails the component before it runs.
 * Loaded by the worker (only `node:` imports and sibling modules, see resolveWorkerUrl).
 */
import { randomBytes, randomInt } from 'node:crypto';
import type { ComponentJob } from './protocol.js';
import type { FileLog, WriteBudget } from './confined-dir.js';
import { componentFilesystem, FS_RESOURCES } from './preview2-fs.js';
import { requestFromGuest, type HttpAnswer, type HttpRequestWire } from './http-bridge.js';
import { InputStream, IoError, OutputStream, Pollable, memorySource, type ByteSink } from './preview2-io.js';

/** What the call's host writes to and how a guest exit leaves the call. */
export interface Preview2Io {
  stdout: ByteSink;
  stderr: ByteSink;
  /** Names hidden in every granted folder (capsule's own state; see protocol.ts hiddenNames). */
  hidden: ((name: string) => boolean) | undefined;
  /** The call's cap on bytes written to its granted folders. */
  writes: WriteBudget;
  /** A learning run's record of every filesystem call. */
  log?: FileLog | undefined;
  /** Ends the call with the guest's exit code (throws). */
  exit(code: number): never;
  /** capsule's outgoing HTTP for this call (http-bridge.ts); absent without grants.network. */
  http?: ((request: HttpRequestWire) => HttpAnswer) | undefined;
}

export interface Preview2Host {
  imports: Record<string, Record<string, unknown>>;
  /** Closes every host file the call opened (also after a trap or an output-cap stop). */
  dispose(): void;
}

// Resource classes without host state of their own (a call's state lives in the instances each
// call creates), so one frozen set serves every call of a worker; the transpiled glue only checks
// `instanceof` on them and reads them.
class TerminalInput {}
class TerminalOutput {}
class Network {}
class TcpSocket {}
class UdpSocket {}
class IncomingDatagramStream {}
class OutgoingDatagramStream {}
class ResolveAddressStream {}
for (const c of [
  IoError,
  Pollable,
  InputStream,
  OutputStream,
  TerminalInput,
  TerminalOutput,
  Network,
  TcpSocket,
  UdpSocket,
  IncomingDatagramStream,
  OutgoingDatagramStream,
  ResolveAddressStream,
  ...FS_RESOURCES,
]) {
  Object.freeze(c.prototype);
  Object.freeze(c);
}

/**
 * A deliberately small preview2 host, built per call (streams, sinks, open files, environment and
 * seed belong to that call only): stdio in memory, the granted environment, clocks and random, the
 * granted folders as `wasi:filesystem` preopens (confined by capsule, see preview2-fs.ts), and
 * network interfaces that answer every request with a denial.
 */
export function preview2Imports(job: ComponentJob, io: Preview2Io): Preview2Host {
  const stdinStream = new InputStream(memorySource(new Uint8Array(0)));
  const stdoutStream = new OutputStream(io.stdout);
  const stderrStream = new OutputStream(io.stderr);
  const fs = componentFilesystem(job.preopens, io.hidden, io.writes, io.log);
  const deny = (): never => {
    throw 'access-denied';
  };
  // Drawn when first asked for: most calls never ask.
  let seed: [bigint, bigint] | undefined;
  const imports: Record<string, Record<string, unknown>> = {
    'wasi:cli/environment': {
      getEnvironment: () => Object.entries(job.env),
      getArguments: () => job.args,
      initialCwd: () => undefined,
    },
    'wasi:cli/exit': {
      exit: (status: { tag: string }) => io.exit(status.tag === 'ok' ? 0 : 1),
      exitWithCode: (code: number) => io.exit(code),
    },
    'wasi:cli/stdin': { getStdin: () => stdinStream },
    'wasi:cli/stdout': { getStdout: () => stdoutStream },
    'wasi:cli/stderr': { getStderr: () => stderrStream },
    'wasi:cli/terminal-input': { TerminalInput },
    'wasi:cli/terminal-output': { TerminalOutput },
    'wasi:cli/terminal-stdin': { getTerminalStdin: () => undefined },
    'wasi:cli/terminal-stdout': { getTerminalStdout: () => undefined },
    'wasi:cli/terminal-stderr': { getTerminalStderr: () => undefined },
    'wasi:clocks/monotonic-clock': {
      now: () => process.hrtime.bigint(),
      resolution: () => 1n,
      subscribeInstant: () => new Pollable(),
      subscribeDuration: () => new Pollable(),
    },
    'wasi:clocks/wall-clock': {
      now: () => {
        const ms = Date.now();
        return { seconds: BigInt(Math.floor(ms / 1000)), nanoseconds: (ms % 1000) * 1_000_000 };
      },
      resolution: () => ({ seconds: 0n, nanoseconds: 1_000_000 }),
    },
    'wasi:filesystem/preopens': fs.preopens,
    'wasi:filesystem/types': fs.types,
    'wasi:io/error': { Error: IoError },
    'wasi:io/poll': {
      Pollable,
      poll: (list: unknown[]) => new Uint32Array(list.map((_, i) => i)),
    },
    'wasi:io/streams': { InputStream, OutputStream },
    'wasi:random/random': {
      getRandomBytes: (len: bigint) => new Uint8Array(randomBytes(Number(len))),
      getRandomU64: () => randomBytes(8).readBigUInt64LE(),
    },
    'wasi:random/insecure': {
      getInsecureRandomBytes: (len: bigint) => new Uint8Array(randomBytes(Number(len))),
      getInsecureRandomU64: () => BigInt(randomInt(2 ** 47)),
    },
    'wasi:random/insecure-seed': {
      insecureSeed: () => (seed ??= [randomBytes(8).readBigUInt64LE(), randomBytes(8).readBigUInt64LE()]),
    },
    // Network: every entry point answers with a valid WASI denial; nothing reaches a socket. A
    // network grant, when there is one, replaces these entries here and adds its interface to
    // PREVIEW2_INTERFACES.
    'wasi:sockets/instance-network': { instanceNetwork: () => new Network() },
    'wasi:sockets/network': { Network, networkErrorCode: () => undefined },
    'wasi:sockets/tcp-create-socket': { createTcpSocket: deny },
    'wasi:sockets/udp-create-socket': { createUdpSocket: deny },
    'wasi:sockets/tcp': { TcpSocket },
    'wasi:sockets/udp': { UdpSocket, IncomingDatagramStream, OutgoingDatagramStream },
    'wasi:sockets/ip-name-lookup': { ResolveAddressStream, resolveAddresses: deny },
    // capsule's own HTTP: each request is checked by the main thread against grants.network; the
    // error (a refusal or a failure) is the result's string.
    'capsule:capability/http': {
      fetch: (raw: unknown) => {
        const request = requestFromGuest(raw);
        if (typeof request === 'string') throw `capsule refused the request: ${request}`;
        if (io.http === undefined) throw 'capsule refused the request: this capability has no grants.network';
        const answer = io.http(request);
        if (!answer.ok) throw answer.error;
        return { status: answer.status, headers: answer.headers, body: answer.body };
      },
    },
  };
  return { imports, dispose: fs.dispose };
}
