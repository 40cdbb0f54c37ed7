// Fetches one URL through capsule's host: the component has no sockets; capsule makes the request and
// checks it against grants.network first. Input: {"url": "...", "method"?: "GET", "follow"?: false}.
import { fetch } from 'capsule:capability/http@0.1.0';

/** UTF-8 bytes to text (QuickJS has no TextDecoder). */
function utf8(bytes) {
  let out = '';
  for (let i = 0; i < bytes.length;) {
    const b = bytes[i];
    const n = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    let cp = n === 1 ? b : b & (0xff >> (n + 1));
    for (let k = 1; k < n; k++) cp = (cp << 6) | (bytes[i + k] & 0x3f);
    out += String.fromCodePoint(cp);
    i += n;
  }
  return out;
}

export function run(input) {
  const { url, method = 'GET', follow = false } = JSON.parse(input);
  const hops = [];
  let target = url;
  for (let hop = 0; hop < 6; hop++) {
    let res;
    try {
      res = fetch({ method, url: target, headers: [['accept', 'text/plain']], body: null });
    } catch (err) {
      // A refusal (or a failed request) is the error string.
      hops.push({ url: target, error: String(err && err.payload !== undefined ? err.payload : err) });
      break;
    }
    const location = res.headers.find(([name]) => name.toLowerCase() === 'location');
    hops.push({ url: target, status: res.status });
    if (follow && res.status >= 300 && res.status < 400 && location !== undefined) {
      // Each hop is a new request, checked against the grants again.
      // QuickJS has no URL: an absolute location as is, a path against this origin.
      target = /^https?:\/\//.test(location[1])
        ? location[1]
        : `${/^https?:\/\/[^/]+/.exec(target)[0]}${location[1]}`;
      continue;
    }
    return JSON.stringify({ hops, body: utf8(res.body) });
  }
  return JSON.stringify({ hops });
}
