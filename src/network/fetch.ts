import http from 'node:http';
import https from 'node:https';
import type { EgressPermit, EgressSession } from './egress.js';
import { ipLiteral, normalizeHost, type EgressTarget } from './policy.js';

/** A request from capability code that has no socket of its own (a Wasm component's fetch). */
export interface EgressFetchRequest {
  method: string;
  url: string;
  headers: ReadonlyArray<readonly [string, string]>;
  body?: Uint8Array | undefined;
}

export interface EgressFetchResponse {
  status: number;
  headers: Array<[string, string]>;
  body: Uint8Array;
}

/** Headers capability code may not set: they would change where or how the request goes. */
const FORBIDDEN = new Set([
  'host',
  'connection',
  'proxy-authorization',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'keep-alive',
  'content-length',
]);

/** What the fetch answers when capsule refuses or the request fails (no exception crosses into the guest). */
export class EgressFetchError extends Error {}

/**
 * One request on behalf of capability code, made by capsule's host: checked by the run's EgressSession,
 * sent to the checked address (TLS verified against the host name), never following redirects (a
 * redirect is returned; following it is a new request, checked again).
 */
export async function egressFetch(
  session: EgressSession,
  request: EgressFetchRequest,
): Promise<EgressFetchResponse> {
  let url: URL;
  try {
    url = new URL(request.url);
  } catch {
    throw new EgressFetchError(`not a valid URL: ${request.url}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new EgressFetchError(`${url.protocol} is not http: or https:`);
  if (url.username !== '' || url.password !== '')
    throw new EgressFetchError('credentials in the URL are not sent');
  const host = normalizeHost(url.hostname);
  if (host === undefined) throw new EgressFetchError(`no valid host in ${request.url}`);
  const method = request.method.toUpperCase();
  if (!/^[A-Z]{1,16}$/.test(method) || method === 'CONNECT')
    throw new EgressFetchError(`method ${request.method} is not allowed`);
  const target: EgressTarget = {
    host,
    port: url.port !== '' ? Number(url.port) : url.protocol === 'https:' ? 443 : 80,
    method,
  };
  let permit: EgressPermit;
  try {
    permit = await session.authorize(target);
  } catch (err) {
    throw new EgressFetchError((err as Error).message);
  }
  try {
    return await send(permit, url, request, session.signal);
  } finally {
    await permit.end();
  }
}

function send(
  permit: EgressPermit,
  url: URL,
  request: EgressFetchRequest,
  signal: AbortSignal,
): Promise<EgressFetchResponse> {
  const headers: Record<string, string> = {};
  for (const [name, value] of request.headers) {
    const n = name.toLowerCase();
    if (!FORBIDDEN.has(n)) headers[n] = value;
  }
  headers['host'] = url.host;
  const body = request.body ?? new Uint8Array(0);
  if (body.length > 0 || !['GET', 'HEAD'].includes(permit.target.method))
    headers['content-length'] = String(body.length);
  if (!permit.fits(body.length))
    return Promise.reject(
      new EgressFetchError('the request body passes limits.networkBytes; nothing was sent'),
    );
  permit.count('out', body.length);

  const tls = url.protocol === 'https:';
  const options: https.RequestOptions = {
    // The checked address, never the name again (no DNS rebinding); TLS still verifies the name.
    host: permit.address,
    family: permit.family,
    port: permit.target.port,
    method: permit.target.method,
    path: `${url.pathname}${url.search}`,
    headers,
    setHost: false,
    agent: false,
    // The run ended (its deadline, a cancel): the request made on its behalf ends too.
    signal,
    ...(tls && ipLiteral(permit.target.host) === undefined ? { servername: permit.target.host } : {}),
  };
  return new Promise((resolve, reject) => {
    const req = (tls ? https : http).request(options, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => {
        if (!permit.count('in', chunk.length)) {
          req.destroy();
          reject(new EgressFetchError('the response was cut at limits.networkBytes'));
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', () => {
        const out: Array<[string, string]> = [];
        for (let i = 0; i < res.rawHeaders.length; i += 2)
          out.push([res.rawHeaders[i] ?? '', res.rawHeaders[i + 1] ?? '']);
        resolve({ status: res.statusCode ?? 0, headers: out, body: new Uint8Array(Buffer.concat(chunks)) });
      });
      res.on('error', (err) => reject(new EgressFetchError(`the response failed (${err.message})`)));
    });
    req.on('error', (err) =>
      reject(
        new EgressFetchError(`the request failed (${(err as NodeJS.ErrnoException).code ?? err.message})`),
      ),
    );
    req.end(Buffer.from(body));
  });
}
