import http from 'node:http';
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';

/**
 * The Engine API over node:http for the requests of one call (ping, info, inspect, create, attach, start, wait,
 * remove, list, events): a `capsule run` process sends only these, and loading dockerode for them costs a
 * one-shot CLI call more (150–220 ms) than the whole container takes. Everything else (builds, exec, archives,
 * top, swarm) still goes through dockerode, loaded when first needed (dockerode-engine.ts). Both send every
 * request through the same pinned agent (engine-pin.ts).
 */
export interface EngineEndpoint {
  /** A unix socket path, or a TCP host and port. */
  socketPath?: string | undefined;
  hostname?: string | undefined;
  port?: number | undefined;
  /** Spoken as https, the engine's certificate checked against `tls.ca`. */
  tls?: { ca: Buffer; cert: Buffer; key: Buffer } | undefined;
  agent: http.Agent;
}

/** A refusal of the Engine API: its status and the engine's own message (read by engineMessage()). */
export class EngineHttpError extends Error {
  readonly statusCode: number;
  readonly json: { message?: string } | undefined;

  constructor(statusCode: number, message: string | undefined, what: string) {
    super(`${what}: (HTTP code ${statusCode}) ${message ?? 'no message'}`);
    this.statusCode = statusCode;
    this.json = message === undefined ? undefined : { message };
  }
}

type Query = Record<string, string | number | boolean | Record<string, unknown> | undefined>;

/** The path with its query: objects (filters) as JSON, as the Engine API reads them. */
function target(path: string, query: Query | undefined): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v === undefined) continue;
    params.append(k, typeof v === 'object' ? JSON.stringify(v) : String(v));
  }
  const qs = params.toString();
  // Unversioned, as dockerode sends them: the daemon answers in its own API version.
  return `${path}${qs === '' ? '' : `?${qs}`}`;
}

function requestOptions(
  ep: EngineEndpoint,
  method: string,
  path: string,
  headers: http.OutgoingHttpHeaders,
): https.RequestOptions {
  return {
    method,
    path,
    agent: ep.agent,
    headers: { Host: 'docker', 'User-Agent': 'capsule', ...headers },
    ...(ep.socketPath !== undefined
      ? { socketPath: ep.socketPath }
      : { hostname: ep.hostname, port: ep.port }),
    ...(ep.tls === undefined ? {} : { ca: ep.tls.ca, cert: ep.tls.cert, key: ep.tls.key }),
  };
}

function send(ep: EngineEndpoint, options: https.RequestOptions): http.ClientRequest {
  return ep.tls === undefined ? http.request(options) : https.request(options);
}

function messageOf(body: Buffer): string | undefined {
  const text = body.toString('utf8').trim();
  if (text === '') return undefined;
  try {
    const m = (JSON.parse(text) as { message?: unknown }).message;
    return typeof m === 'string' ? m : text;
  } catch {
    return text;
  }
}

function readAll(res: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => resolve(Buffer.concat(chunks)));
    res.on('error', reject);
    res.on('aborted', () => reject(new Error('the engine closed the connection mid-answer')));
  });
}

/** One request, its whole answer read; a status of 300 or more rejects with the engine's message. */
export async function engineCall(
  ep: EngineEndpoint,
  method: 'GET' | 'POST' | 'DELETE',
  path: string,
  options: { query?: Query | undefined; body?: unknown } = {},
): Promise<Buffer> {
  const payload = options.body === undefined ? undefined : Buffer.from(JSON.stringify(options.body));
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = send(
      ep,
      requestOptions(
        ep,
        method,
        target(path, options.query),
        payload === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': payload.length },
      ),
    );
    req.once('response', resolve);
    req.once('error', reject);
    req.end(payload);
  });
  const body = await readAll(res);
  const status = res.statusCode ?? 0;
  if (status < 200 || status >= 300) throw new EngineHttpError(status, messageOf(body), `${method} ${path}`);
  return body;
}

/** engineCall, its answer parsed as JSON. */
export async function engineJson<T>(
  ep: EngineEndpoint,
  method: 'GET' | 'POST' | 'DELETE',
  path: string,
  options: { query?: Query | undefined; body?: unknown } = {},
): Promise<T> {
  const body = await engineCall(ep, method, path, options);
  return JSON.parse(body.toString('utf8')) as T;
}

/** A streamed answer (the event log): the response itself, once its status says it is one. */
export async function engineStream(
  ep: EngineEndpoint,
  path: string,
  query: Query | undefined,
): Promise<IncomingMessage> {
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = send(ep, requestOptions(ep, 'GET', target(path, query), {}));
    req.once('response', resolve);
    req.once('error', reject);
    req.end();
  });
  const status = res.statusCode ?? 0;
  if (status < 200 || status >= 300)
    throw new EngineHttpError(status, messageOf(await readAll(res)), `GET ${path}`);
  return res;
}

/**
 * A hijacked connection (attach): the engine answers 101 and the socket carries the raw multiplexed stream in
 * both directions; ending it half-closes stdin while the output keeps flowing back.
 */
export function engineUpgrade(ep: EngineEndpoint, path: string, query: Query): Promise<Duplex> {
  return new Promise<Duplex>((resolve, reject) => {
    const req = send(
      ep,
      requestOptions(ep, 'POST', target(path, query), {
        Connection: 'Upgrade',
        Upgrade: 'tcp',
        'Content-Type': 'application/vnd.docker.raw-stream',
      }),
    );
    req.once('upgrade', (_res: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (head.length > 0) socket.unshift(head);
      resolve(socket);
    });
    req.once('response', (res: IncomingMessage) => {
      readAll(res).then(
        (body) => reject(new EngineHttpError(res.statusCode ?? 0, messageOf(body), `POST ${path}`)),
        reject,
      );
    });
    req.once('error', reject);
    req.end();
  });
}
