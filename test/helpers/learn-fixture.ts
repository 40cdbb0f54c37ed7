import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The learn tests' capability: reads data/in.txt, writes out/res.txt and calls a loopback listener
 * (directly on the host; through capsule's egress socket in docker), in node.
 */
export const FETCHER = `import fs from 'node:fs';
import http from 'node:http';
const dir = process.env.CAPSULE_PROJECT_DIR;
const input = JSON.parse(fs.readFileSync(0, 'utf8') || '{}');
const text = fs.readFileSync(dir + '/data/in.txt', 'utf8').trim();
fs.writeFileSync(dir + '/out/res.txt', text.toUpperCase());
const sock = process.env.CAPSULE_EGRESS_SOCKET;
const url = 'http://127.0.0.1:' + input.port + '/x';
const req = sock
  ? http.request({ socketPath: sock, path: url, headers: { host: '127.0.0.1:' + input.port } })
  : http.request(url);
req.on('response', (r) => {
  let b = '';
  r.on('data', (d) => (b += d));
  r.on('end', () => console.log(JSON.stringify({ text, reply: b })));
});
req.end();
`;

/** A loopback listener that answers "pong" and counts its requests: what a run reached, by effect. */
export interface PongListener {
  port: number;
  readonly hits: number;
  close(): Promise<void>;
}

export async function pongListener(): Promise<PongListener> {
  let hits = 0;
  const server = createServer((_req, res) => {
    hits++;
    res.end('pong');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    get hits() {
      return hits;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
