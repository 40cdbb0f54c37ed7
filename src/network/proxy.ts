import { chmod, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { CapsuleError } from '../base/errors.js';
import type { EgressPermit, EgressSession } from './egress.js';
import { normalizeHost, type EgressTarget } from './policy.js';

/**
 * capsule's egress proxy for one run, on a unix socket (bind-mounted into a `--network none` container):
 * an HTTP forward proxy (absolute-form `GET http://host/…`, or origin-form with a Host header, as
 * `curl --unix-socket` sends) and HTTP CONNECT tunnels. Each request is checked by the run's
 * EgressSession; the connection goes to the address that was checked. Redirects are passed back to the
 * client, whose next request is checked like any other. See docs/network.md.
 */
export interface EgressProxy {
  readonly socketPath: string;
  close(): Promise<void>;
}

/** Headers a proxy consumes, never forwarded (hop-by-hop, RFC 9110 7.6.1, and proxy credentials). */
const HOP_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

function denyText(err: unknown): string {
  return err instanceof CapsuleError ? err.message : `capsule refused the request: ${(err as Error).message}`;
}

/** `host:port` (CONNECT authority, Host header) → target; undefined when it is not one. */
function parseAuthority(
  authority: string,
  defaultPort: number | undefined,
  method: string,
): EgressTarget | undefined {
  const m = /^(\[[^\]]*\]|[^:[\]]*)(?::(\d{1,5}))?$/.exec(authority);
  if (m === null) return undefined;
  const host = normalizeHost(m[1] ?? '');
  const port = m[2] !== undefined ? Number(m[2]) : defaultPort;
  if (host === undefined || port === undefined || port < 1 || port > 65535) return undefined;
  return { host, port, method };
}

function forwardHeaders(raw: string[], hostHeader: string): http.OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  const connectionTokens = new Set<string>();
  for (let i = 0; i < raw.length; i += 2) {
    if ((raw[i] ?? '').toLowerCase() === 'connection')
      for (const t of (raw[i + 1] ?? '').split(',')) connectionTokens.add(t.trim().toLowerCase());
  }
  for (let i = 0; i < raw.length; i += 2) {
    const name = (raw[i] ?? '').toLowerCase();
    const value = raw[i + 1] ?? '';
    if (HOP_HEADERS.has(name) || connectionTokens.has(name) || name === 'host') continue;
    const prev = out[name];
    out[name] = prev === undefined ? value : Array.isArray(prev) ? [...prev, value] : [prev, value];
  }
  out['host'] = hostHeader;
  return out;
}

export async function startEgressProxy(session: EgressSession, socketPath: string): Promise<EgressProxy> {
  const sockets = new Set<Duplex>();
  const track = (s: Duplex): void => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  };

  const server = http.createServer({ requestTimeout: 0 });
  server.on('connection', track);

  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    void (async () => {
      const method = (req.method ?? 'GET').toUpperCase();
      const url = req.url ?? '/';
      let target: EgressTarget | undefined;
      let path = url;
      let hostHeader: string;
      if (/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) {
        let parsed: URL;
        try {
          parsed = new URL(url);
        } catch {
          return reply(res, 400, 'capsule: not a valid URL');
        }
        if (parsed.protocol !== 'http:')
          return reply(
            res,
            400,
            `capsule: ${parsed.protocol} requests go through a CONNECT tunnel (https), not the forward proxy`,
          );
        if (parsed.username !== '' || parsed.password !== '')
          return reply(res, 400, 'capsule: credentials in the URL are not forwarded');
        target = parseAuthority(parsed.host, 80, method);
        path = `${parsed.pathname}${parsed.search}`;
        hostHeader = parsed.host;
      } else {
        hostHeader = req.headers.host ?? '';
        target = parseAuthority(hostHeader, 80, method);
      }
      if (target === undefined) return reply(res, 400, 'capsule: the request names no valid host');
      let permit: EgressPermit;
      try {
        permit = await session.authorize(target);
      } catch (err) {
        return reply(res, 403, denyText(err));
      }
      forward(req, res, permit, path, hostHeader, track);
    })();
  });

  server.on('connect', (req: http.IncomingMessage, client: Duplex, head: Buffer) => {
    track(client);
    void (async () => {
      const target = parseAuthority(req.url ?? '', undefined, 'CONNECT');
      if (target === undefined) {
        client.end(
          'HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\ncapsule: CONNECT needs host:port\n',
        );
        return;
      }
      let permit: EgressPermit;
      try {
        permit = await session.authorize(target);
      } catch (err) {
        const text = `${denyText(err)}\n`;
        client.end(
          `HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
        );
        return;
      }
      tunnel(client, head, permit, track);
    })();
  });

  await rm(socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // The sandbox user (another uid) must be able to connect; the folder around it decides who can reach it.
  await chmod(socketPath, 0o666);

  return {
    socketPath,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sockets) s.destroy();
      server.closeAllConnections();
      await closed;
      await rm(socketPath, { force: true });
    },
  };
}

function reply(res: http.ServerResponse, status: number, text: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'text/plain', 'x-capsule-egress': 'denied', connection: 'close' });
  res.end(`${text}\n`);
}

function forward(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  permit: EgressPermit,
  path: string,
  hostHeader: string,
  track: (s: Duplex) => void,
): void {
  const { address, family, target } = permit;
  let failed = false;
  const fail = (note: string): void => {
    if (failed) return;
    failed = true;
    upstream.destroy();
    if (!res.headersSent) reply(res, 502, `capsule: ${note}`);
    else res.destroy();
    void permit.end(note);
  };
  // The checked address, never the name: a second lookup could answer differently (DNS rebinding).
  const upstream = http.request({
    host: address,
    family,
    port: target.port,
    method: target.method,
    path,
    headers: forwardHeaders(req.rawHeaders, hostHeader),
    setHost: false,
    agent: false,
  });
  // Closed with the proxy when the run ends, like the client's side.
  upstream.on('socket', track);
  req.on('data', (chunk: Buffer) => {
    if (!permit.count('out', chunk.length)) fail('cut: the run passed limits.networkBytes');
  });
  req.pipe(upstream);
  upstream.on('error', (err) =>
    fail(`upstream failed (${(err as NodeJS.ErrnoException).code ?? err.message})`),
  );
  upstream.on('response', (up) => {
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(up.headers))
      if (v !== undefined && !HOP_HEADERS.has(k)) headers[k] = v;
    res.writeHead(up.statusCode ?? 502, headers);
    up.on('data', (chunk: Buffer) => {
      if (!permit.count('in', chunk.length)) {
        fail('cut: the run passed limits.networkBytes');
        return;
      }
      res.write(chunk);
    });
    up.on('end', () => {
      if (failed) return;
      res.end();
      void permit.end();
    });
    up.on('error', () => fail('upstream response failed'));
  });
  res.on('close', () => {
    if (!res.writableFinished) fail('the client went away');
  });
}

function tunnel(client: Duplex, head: Buffer, permit: EgressPermit, track: (s: Duplex) => void): void {
  const { address, family, target } = permit;
  const upstream = net.connect({ host: address, family, port: target.port });
  track(upstream);
  let done = false;
  const finish = (note?: string): void => {
    if (done) return;
    done = true;
    client.destroy();
    upstream.destroy();
    void permit.end(note);
  };
  upstream.once('connect', () => {
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) {
      if (!permit.count('out', head.length)) return finish('cut: the run passed limits.networkBytes');
      upstream.write(head);
    }
    client.on('data', (chunk: Buffer) => {
      if (!permit.count('out', chunk.length)) return finish('cut: the run passed limits.networkBytes');
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!permit.count('in', chunk.length)) return finish('cut: the run passed limits.networkBytes');
      client.write(chunk);
    });
    client.once('end', () => upstream.end());
    upstream.once('end', () => client.end());
    client.once('close', () => finish());
    upstream.once('close', () => finish());
  });
  upstream.once('error', (err) => {
    if (!client.destroyed)
      client.end(
        `HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\n\r\ncapsule: cannot reach ${target.host}:${target.port} (${(err as NodeJS.ErrnoException).code ?? 'error'})\n`,
      );
    finish(`connect failed (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  });
  client.once('error', () => finish());
}
