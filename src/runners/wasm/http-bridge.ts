/**
 * capsule's outgoing HTTP for components (`capsule:capability/http`), across the worker boundary. A
 * component's `fetch` is a synchronous import, but the request is made by the main thread, where the
 * egress policy lives (src/network): the worker posts the request and blocks on a shared flag until
 * the answer is queued on a port of its own. The guest never holds a socket. Loaded by the worker too:
 * only `node:` imports.
 */
import { MessageChannel, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';

/** A request as the guest wrote it, checked for shape (not for policy: the main thread decides). */
export interface HttpRequestWire {
  method: string;
  url: string;
  headers: Array<[string, string]>;
  body: Uint8Array | undefined;
}

export type HttpAnswer =
  | { ok: true; status: number; headers: Array<[string, string]>; body: Uint8Array }
  | { ok: false; error: string };

/** Worker → main: one request of job `id`; the answer goes to `port`, then `flag` is set. */
export interface HttpCall {
  type: 'http';
  id: number;
  request: HttpRequestWire;
  port: MessagePort;
  flag: SharedArrayBuffer;
}

const MAX_HEADERS = 64;
const MAX_TEXT = 8192;

/** The guest's request record, or why it is malformed (guest values are untrusted). */
export function requestFromGuest(raw: unknown): HttpRequestWire | string {
  if (typeof raw !== 'object' || raw === null) return 'the request must be a record';
  const r = raw as Record<string, unknown>;
  if (typeof r.method !== 'string' || r.method.length > 16) return 'method must be a short string';
  if (typeof r.url !== 'string' || r.url.length > MAX_TEXT) return 'url must be a string';
  const headers: Array<[string, string]> = [];
  const list = r.headers ?? [];
  if (!Array.isArray(list) || list.length > MAX_HEADERS)
    return `headers must be a list of at most ${MAX_HEADERS}`;
  for (const h of list) {
    if (!Array.isArray(h) || typeof h[0] !== 'string' || typeof h[1] !== 'string')
      return 'each header is [name, value]';
    if (h[0].length + h[1].length > MAX_TEXT || /[\r\n\0]/.test(h[0] + h[1]))
      return 'a header is too long or holds a line break';
    headers.push([h[0], h[1]]);
  }
  const body = r.body ?? undefined;
  if (body !== undefined && !(body instanceof Uint8Array)) return 'body must be bytes';
  return { method: r.method, url: r.url, headers, body };
}

/** Worker side: post the request and block this thread until capsule answered. */
export function blockingHttp(
  post: (call: HttpCall, transfer: MessagePort[]) => void,
  id: number,
  request: HttpRequestWire,
): HttpAnswer {
  const { port1, port2 } = new MessageChannel();
  const flag = new SharedArrayBuffer(4);
  post({ type: 'http', id, request, port: port2, flag }, [port2]);
  // No timeout here: the main thread's wall-clock limit terminates this worker if no answer comes.
  Atomics.wait(new Int32Array(flag), 0, 0);
  const received = receiveMessageOnPort(port1) as { message: HttpAnswer } | undefined;
  port1.close();
  return received?.message ?? { ok: false, error: 'capsule gave no answer' };
}

/** What a component without grants.network is answered, whoever answers it. */
export const NO_NETWORK_GRANT = 'capsule refused the request: this capability has no grants.network';

/** Main side: answer one call (no handler: the capability has no network grant). */
export function answerHttp(
  call: HttpCall,
  handler: ((request: HttpRequestWire) => Promise<HttpAnswer>) | undefined,
): void {
  const done = (answer: HttpAnswer): void => {
    call.port.postMessage(answer);
    const view = new Int32Array(call.flag);
    Atomics.store(view, 0, 1);
    Atomics.notify(view, 0);
  };
  if (handler === undefined) {
    done({ ok: false, error: NO_NETWORK_GRANT });
    return;
  }
  handler(call.request).then(done, (err: unknown) =>
    done({ ok: false, error: err instanceof Error ? err.message : String(err) }),
  );
}
