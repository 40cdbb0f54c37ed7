import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { manifestSchema } from '../../../src/manifest/schema.js';
import type { EgressSession, Resolver } from '../../../src/network/egress.js';

/** An HTTP listener on 127.0.0.1 that counts the connections it accepted (the effect a test judges). */
export interface Listener {
  port: number;
  /** TCP connections accepted so far. */
  connections: number;
  /** Requests seen: method, URL and Host header. */
  requests: Array<{ method: string; url: string; host: string | undefined }>;
  close(): Promise<void>;
}

export async function listen(
  handler: (req: http.IncomingMessage, res: http.ServerResponse) => void = (_req, res) => res.end('hello'),
): Promise<Listener> {
  const server = http.createServer((req, res) => {
    state.requests.push({ method: req.method ?? '', url: req.url ?? '', host: req.headers.host });
    handler(req, res);
  });
  const state: Listener = {
    port: 0,
    connections: 0,
    requests: [],
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  server.on('connection', () => (state.connections += 1));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.port = (server.address() as AddressInfo).port;
  return state;
}

/**
 * The test build's resolver: test names map to loopback, everything else fails like an unknown name.
 * Never a real DNS lookup. Handed to the runners as a constructor option, never through a manifest.
 */
export function mapResolver(map: Record<string, string | string[]>): Resolver & { asked: string[] } {
  const asked: string[] = [];
  const resolve = (host: string): Promise<Array<{ address: string; family: 4 | 6 }>> => {
    asked.push(host);
    const found = map[host];
    if (found === undefined) {
      const err = new Error(`test resolver: ${host} is not mapped`) as NodeJS.ErrnoException;
      err.code = 'ENOTFOUND';
      return Promise.reject(err);
    }
    return Promise.resolve(
      (Array.isArray(found) ? found : [found]).map((address) => ({
        address,
        family: address.includes(':') ? 6 : 4,
      })),
    );
  };
  return Object.assign(resolve, { asked });
}

/** The capability an egress session judges: a docker capability named `net` with these network grants and limits. */
export function egressCapability(
  network: unknown,
  limits: Record<string, number> = {},
): ConstructorParameters<typeof EgressSession>[0]['capability'] {
  const manifest = manifestSchema.parse({
    schemaVersion: 1,
    name: 'net',
    description: 'test',
    environment: 'docker',
    entry: 'main.mjs',
    docker: { image: 'capsule/node:1' },
    grants: { network },
    limits,
  });
  return { name: 'net', contentHash: 'sha256:test', manifest };
}
