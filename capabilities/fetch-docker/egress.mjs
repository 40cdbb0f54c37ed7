// capsule's egress client for docker capabilities: the container has no network; every request goes to
// capsule's proxy on the unix socket in $CAPSULE_EGRESS_SOCKET, which checks it against grants.network.
// Copy this file into your capability to use it (see docs/network.md).
import http from 'node:http';
import tls from 'node:tls';

const socketPath = process.env.CAPSULE_EGRESS_SOCKET;

/** One request: `{ status, headers, body }` (body a Buffer). Redirects are returned, not followed. */
export function request(url, { method = 'GET', headers = {}, body } = {}) {
  if (socketPath === undefined)
    return Promise.reject(new Error('no CAPSULE_EGRESS_SOCKET: the capability has no grants.network'));
  const u = new URL(url);
  const send = (options) =>
    new Promise((resolve, reject) => {
      const req = http.request(options, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });
  if (u.protocol === 'http:') {
    // Forward proxy: the absolute URL as the request target, over the socket.
    return send({ socketPath, method, path: u.href, headers: { ...headers, host: u.host } });
  }
  if (u.protocol !== 'https:') return Promise.reject(new Error(`${u.protocol} is not supported`));
  // HTTPS: a CONNECT tunnel through the proxy, then TLS end to end with the host (verified as usual).
  const authority = `${u.hostname}:${u.port || 443}`;
  return new Promise((resolve, reject) => {
    const connect = http.request({ socketPath, method: 'CONNECT', path: authority });
    connect.on('connect', (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        resolve({ status: res.statusCode, headers: res.headers, body: Buffer.alloc(0) });
        return;
      }
      const secure = tls.connect({ socket, servername: u.hostname });
      send({
        createConnection: () => secure,
        method,
        path: `${u.pathname}${u.search}`,
        headers: { ...headers, host: u.host },
      }).then(resolve, reject);
    });
    connect.on('error', reject);
    connect.end();
  });
}
