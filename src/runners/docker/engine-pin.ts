import http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';

/**
 * Connections bound to one daemon (docs/scale-out.md#posture-is-bound-to-the-daemon). Once armed with a canary
 * (a volume with a random name capsule created on the daemon it measured), every new connection is asked for
 * that volume before capsule sends anything on it, and is used only when the daemon at its other end has it:
 * a socket path re-pointed at another daemon, or another daemon behind the same address, never gets a request.
 * Once lost (another daemon answered, the daemon went away, restarted or reloaded), every open connection is
 * closed and none is opened again: nothing more reaches the daemon on this measurement.
 *
 * Why a canary and not the daemon's ID: on Docker before 23 `ID` is the host's trust key, the same for every
 * dockerd of a host (measured: all six engines here report one ID), and GET /info costs ~4.5 ms against ~0.4 ms
 * for GET /volumes/NAME.
 */
export interface PinnedConnections {
  /** The agent dockerode sends every request through. */
  readonly agent: http.Agent;
  /** From now on a connection is used only when its daemon has `canary`; connections opened before are closed. */
  arm(canary: string): void;
  /** No request from now on: every open connection is closed, none is opened again. */
  lose(why: string): void;
  /** Why the connections were lost, or undefined while they hold. */
  lost(): string | undefined;
}

/** How long a new connection may take to show the canary. */
const VERIFY_TIMEOUT_MS = 5000;

export function pinnedConnections(options: { tls: boolean; where: string }): PinnedConnections {
  let canary: string | undefined;
  let lostWhy: string | undefined;
  const open = new Set<Duplex>();
  const verified = new WeakSet<Duplex>();
  const Base = options.tls ? https.Agent : http.Agent;

  class PinnedAgent extends Base {
    override createConnection(
      connectOptions: http.ClientRequestArgs,
      callback?: (err: Error | null, stream: Duplex) => void,
    ): Duplex | null | undefined {
      const done = callback ?? (() => {});
      if (lostWhy !== undefined) {
        done(new Error(lostWhy), undefined as unknown as Duplex);
        return undefined;
      }
      const socket = super.createConnection(connectOptions) as Duplex;
      open.add(socket);
      socket.once('close', () => open.delete(socket));
      const expected = canary;
      if (expected === undefined) return socket;
      showsCanary(socket, expected).then(
        () => {
          // The daemon may have gone (or the pin been lost) while the answer was on its way.
          if (lostWhy !== undefined || canary !== expected) {
            socket.destroy();
            done(new Error(lostWhy ?? 'the engine was measured again'), socket);
            return;
          }
          verified.add(socket);
          // A connection error is a reconnect: whatever answers next is measured again first.
          socket.on('error', (err: NodeJS.ErrnoException) =>
            lose(`the connection to ${options.where} failed (${err.code ?? err.message})`),
          );
          done(null, socket);
        },
        (err: unknown) => {
          socket.destroy();
          const why =
            err instanceof CanaryMissing
              ? `another daemon answers at ${options.where} now (it lacks the canary volume of the one whose posture was measured)`
              : `the connection to ${options.where} failed (${(err as Error).message})`;
          lose(why);
          done(new Error(why), socket);
        },
      );
      return undefined;
    }

    override keepSocketAlive(socket: Duplex): boolean {
      // Only connections checked against the current canary are kept for the next request.
      if (lostWhy !== undefined || (canary !== undefined && !verified.has(socket))) return false;
      return (super.keepSocketAlive as (s: Duplex) => boolean | undefined)(socket) !== false;
    }
  }

  const agent = new PinnedAgent({ keepAlive: true });

  const closeAll = (): void => {
    for (const s of [...open]) s.destroy();
  };
  const lose = (why: string): void => {
    if (lostWhy !== undefined) return;
    lostWhy = why;
    closeAll();
  };
  return {
    agent,
    arm(next: string): void {
      canary = next;
      // Connections made before the pin were never checked.
      closeAll();
    },
    lose,
    lost: () => lostWhy,
  };
}

class CanaryMissing extends Error {}

/**
 * Asks the daemon at the other end of `socket` for the canary volume, reading the answer off the socket before
 * the HTTP client gets it (the agent hands it over afterwards, as it would a kept-alive connection).
 */
function showsCanary(socket: Duplex, canary: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const finish = (err?: Error): void => {
      clearTimeout(timer);
      socket.removeListener('data', onData);
      socket.removeListener('error', onError);
      socket.removeListener('close', onClose);
      if (err === undefined) resolve();
      else reject(err);
    };
    const onError = (err: Error): void => finish(err);
    const onClose = (): void => finish(new Error('the connection closed'));
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk]);
      if (buffered.length > 64 * 1024) return finish(new Error('an oversized answer'));
      const end = buffered.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buffered.subarray(0, end).toString('latin1').split('\r\n');
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(head[0] ?? '')?.[1];
      const header = (name: string): string | undefined => {
        const line = head.find((h) => h.toLowerCase().startsWith(`${name}:`));
        return line?.slice(line.indexOf(':') + 1).trim();
      };
      if (status === undefined) return finish(new Error('not an Engine API answer'));
      const raw = buffered.subarray(end + 4);
      let body: Buffer;
      if (header('transfer-encoding')?.toLowerCase() === 'chunked') {
        const decoded = dechunk(raw);
        if (decoded === undefined) return;
        if (decoded === 'bad') return finish(new Error('not an Engine API answer'));
        body = decoded;
      } else {
        const length = Number(header('content-length'));
        if (!Number.isInteger(length)) return finish(new Error('not an Engine API answer'));
        if (raw.length < length) return;
        if (raw.length > length) return finish(new Error('more than one answer'));
        body = raw;
      }
      if (status === '404') return finish(new CanaryMissing());
      let name: unknown;
      try {
        name = (JSON.parse(body.toString('utf8')) as { Name?: unknown }).Name;
      } catch {
        name = undefined;
      }
      if (status !== '200' || name !== canary) return finish(new CanaryMissing());
      finish();
    };
    const timer = setTimeout(
      () => finish(new Error(`no answer within ${VERIFY_TIMEOUT_MS} ms`)),
      VERIFY_TIMEOUT_MS,
    );
    socket.on('data', onData);
    socket.once('error', onError);
    socket.once('close', onClose);
    socket.write(`GET /volumes/${canary} HTTP/1.1\r\nHost: docker\r\nUser-Agent: capsule\r\n\r\n`);
  });
}

/**
 * A chunked body, complete and nothing after it: the bytes, undefined while more must arrive, 'bad' when it is
 * not chunked encoding (or something follows it).
 */
function dechunk(raw: Buffer): Buffer | undefined | 'bad' {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = raw.indexOf('\r\n', at);
    if (eol < 0) return undefined;
    const size = parseInt(raw.subarray(at, eol).toString('latin1').split(';')[0] ?? '', 16);
    if (!Number.isInteger(size) || size < 0) return 'bad';
    if (size === 0) {
      // No trailers from the Engine API: the last chunk is followed by one empty line.
      if (raw.length < eol + 4) return undefined;
      return raw.length === eol + 4 && raw.subarray(eol + 2, eol + 4).toString('latin1') === '\r\n'
        ? Buffer.concat(parts)
        : 'bad';
    }
    if (raw.length < eol + 2 + size + 2) return undefined;
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}
