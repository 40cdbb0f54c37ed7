// Hostile capability code inside a --network none container: tries every way out it can think of.
// Input: {"port": granted listener port, "denied": denied listener port, "other": another port}.
import http from 'node:http';
import net from 'node:net';

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const { port, denied, other } = JSON.parse(Buffer.concat(chunks).toString());
const socketPath = process.env.CAPSULE_EGRESS_SOCKET;
const out = {};

const direct = (host, p) =>
  new Promise((resolve) => {
    const s = net.connect({ host, port: p, timeout: 2000 });
    s.once('connect', () => (s.destroy(), resolve('connected')));
    s.once('timeout', () => (s.destroy(), resolve('timeout')));
    s.once('error', (e) => resolve(`error:${e.code}`));
  });
const viaProxy = (options) =>
  new Promise((resolve) => {
    const req = http.request({ socketPath, ...options }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('connect', (res, s) => (s.destroy(), resolve(res.statusCode)));
    req.on('error', (e) => resolve(`error:${e.code}`));
    req.end();
  });

out.directGranted = await direct('127.0.0.1', port);
out.directDenied = await direct('127.0.0.1', denied);
out.directByName = await direct('api.test', port);
out.ungranted = await viaProxy({ path: `http://evil.test:${denied}/` });
out.hostHeader = await viaProxy({ path: '/', headers: { host: `evil.test:${denied}` } });
out.ipLiteral = await viaProxy({ path: `http://127.0.0.1:${port}/` });
out.connectOtherPort = await viaProxy({ method: 'CONNECT', path: `api.test:${other}` });
out.connectIp = await viaProxy({ method: 'CONNECT', path: `127.0.0.1:${port}` });
out.granted = await viaProxy({ path: `http://api.test:${port}/`, headers: { host: `api.test:${port}` } });
console.log(JSON.stringify(out));
