// Input: {"url": "...", "method"?: "GET", "follow"?: false}. Prints the status line and the body.
import { request } from './egress.mjs';

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const input = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
let url = input.url;
for (let hop = 0; ; hop++) {
  const res = await request(url, { method: input.method ?? 'GET' });
  console.log(`${res.status} ${url}`);
  const location = res.headers.location;
  if (input.follow === true && res.status >= 300 && res.status < 400 && location !== undefined && hop < 5) {
    // Each hop is a new request through capsule, checked against the grants again.
    url = new URL(location, url).href;
    continue;
  }
  process.stdout.write(res.body);
  process.exitCode = res.status < 400 ? 0 : 2;
  break;
}
