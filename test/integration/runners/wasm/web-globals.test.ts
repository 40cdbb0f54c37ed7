import { componentize } from 'componentize-qjs';
import { afterAll, describe, expect, it } from 'vitest';
import { componentizeJs, defaultWitPath } from '../../../../src/runners/wasm/componentize.js';
import { WasmRunner } from '../../../../src/runners/wasm/wasm-runner.js';
import { rawSpec } from './helpers.js';

const runner = new WasmRunner({ poolSize: 1 });
afterAll(() => runner.close());

/**
 * One probe, run twice: inside a component capsule built (QuickJS, with capsule's web globals) and in
 * Node, whose TextEncoder, TextDecoder, URL, atob and structuredClone are the reference. Each entry is
 * what one call gave, or the name of what it threw.
 */
const PROBE = `
const bytes = (a) => new Uint8Array(a);
const tried = (fn) => { try { return fn(); } catch (e) { return 'threw ' + e.name; } };
const probes = {
  types: () => ['TextEncoder', 'TextDecoder', 'URL', 'URLSearchParams', 'atob', 'btoa', 'structuredClone'].map((n) => typeof globalThis[n]),
  encode: () => Array.from(new TextEncoder().encode('aé€😀')),
  encodeLoneSurrogate: () => Array.from(new TextEncoder().encode('x\\uD800y')),
  encodeEmpty: () => new TextEncoder().encode().length,
  encodeInto: () => { const d = new Uint8Array(5); const r = new TextEncoder().encodeInto('aé€', d); return [r.read, r.written, Array.from(d)]; },
  encoding: () => [new TextEncoder().encoding, new TextDecoder().encoding, new TextDecoder('UTF8').encoding],
  decodeMultiByte: () => new TextDecoder().decode(bytes([0x61, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80])),
  decodeInvalid: () => [
    [0xff], [0x80], [0xc3], [0xc3, 0x28], [0xe2, 0x82], [0xe2, 0x82, 0x62], [0xf0, 0x9f, 0x98], [0xed, 0xa0, 0x80],
    [0xc0, 0xaf], [0xf4, 0x90, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0x61, 0xfe, 0x62],
  ].map((b) => Array.from(new TextDecoder().decode(bytes(b))).map((c) => c.codePointAt(0))),
  decodeFatal: () => [tried(() => new TextDecoder('utf-8', { fatal: true }).decode(bytes([0x61, 0xff]))), new TextDecoder('utf-8', { fatal: true }).fatal],
  decodeBOM: () => [new TextDecoder().decode(bytes([0xef, 0xbb, 0xbf, 0x61])).length, new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes([0xef, 0xbb, 0xbf, 0x61])).length, new TextDecoder().ignoreBOM],
  decodeStream: () => { const d = new TextDecoder(); return [d.decode(bytes([0xe2, 0x82]), { stream: true }), d.decode(bytes([0xac, 0xe2])), d.decode(bytes([0x61]))]; },
  decodeNoStream: () => { const d = new TextDecoder(); return [d.decode(bytes([0xe2, 0x82]), { stream: false }), d.decode(bytes([0xac]))]; },
  decodeViews: () => [new TextDecoder().decode(bytes([0x68, 0x69]).buffer), new TextDecoder().decode(new DataView(bytes([0x7a, 0x68, 0x69]).buffer, 1)), new TextDecoder().decode()],
  roundTrip: () => new TextDecoder().decode(new TextEncoder().encode('Grüße, 世界 🌍')),
  url: () => { const u = new URL('HTTPS://user:pw@Example.COM:443/a/./b/../c d?x=1&y=a b#frag'); return [u.href, u.protocol, u.username, u.password, u.host, u.hostname, u.port, u.pathname, u.search, u.hash, u.origin, u.searchParams.get('y')]; },
  urlPort: () => { const u = new URL('http://h.test:8080/'); return [u.host, u.port, u.origin, String(u)]; },
  urlRelative: () => ['../x?q#h', '/root', '?only', '#only', 'sib', '//other.test/p', ''].map((r) => new URL(r, 'http://h.test/a/b/c?s#f').href),
  urlNonSpecial: () => { const u = new URL('mailto:someone@example.com'); return [u.href, u.protocol, u.pathname, u.origin]; },
  urlInvalid: () => [tried(() => new URL('no scheme')), tried(() => new URL('http://')), tried(() => new URL('http://h:99999/')), URL.canParse('https://ok.test'), URL.canParse('nope')],
  urlParams: () => { const u = new URL('https://h.test/p?a=1&b=2&a=3'); u.searchParams.append('c', 'é & ='); u.searchParams.delete('b'); return [u.href, u.searchParams.getAll('a'), u.searchParams.has('c'), u.search]; },
  searchParams: () => { const p = new URLSearchParams({ z: '1', a: 'x y' }); p.sort(); return [p.toString(), [...new URLSearchParams('?q=%20a+b&r')].join(';'), p.size]; },
  json: () => JSON.stringify({ u: new URL('http://h.test/x') }),
  base64: () => [btoa('hello'), atob('aGVsbG8='), btoa(String.fromCharCode(0xe9, 0xff)), Array.from(atob('6f8=')).map((c) => c.charCodeAt(0)), atob(btoa('\\x00\\x01binary'))],
  clone: () => {
    const src = { n: 1, s: 'x', a: [1, [2]], d: new Date(5), m: new Map([['k', { v: 1 }]]), set: new Set([1, 2]), u8: bytes([1, 2, 3]), re: /a+/gi, nested: { deep: { er: new RangeError('r') } } };
    src.self = src;
    const c = structuredClone(src);
    return [c !== src, c.self === c, c.a[1][0], c.a !== src.a, c.d instanceof Date && c.d.getTime(), c.m.get('k').v, c.m.get('k') !== src.m.get('k'), c.set.has(2), Array.from(c.u8), c.u8.buffer !== src.u8.buffer, String(c.re), c.nested.deep.er instanceof RangeError, c.nested.deep.er.message];
  },
  cloneRefused: () => [tried(() => structuredClone(() => 1)), tried(() => structuredClone({ f: Symbol('s') }))],
};
export function run() {
  const out = {};
  for (const [name, fn] of Object.entries(probes)) out[name] = tried(fn);
  return JSON.stringify(out);
}
`;

async function inNode(source: string): Promise<Record<string, unknown>> {
  const mod = (await import(`data:text/javascript,${encodeURIComponent(source)}`)) as { run: () => string };
  return JSON.parse(mod.run()) as Record<string, unknown>;
}

async function inComponent(component: Uint8Array): Promise<Record<string, unknown>> {
  const r = await runner.runRaw(rawSpec('probe.wasm', component, '{}'));
  const stdout = Buffer.from(r.stdout).toString('utf8');
  expect({ exitCode: r.exitCode, stderr: Buffer.from(r.stderr).toString('utf8') }).toEqual({
    exitCode: 0,
    stderr: '',
  });
  return JSON.parse(stdout) as Record<string, unknown>;
}

describe('web globals in the JavaScript world of a component capsule builds', () => {
  it('TextEncoder, TextDecoder, URL, URLSearchParams, atob/btoa and structuredClone behave as Node’s do', async () => {
    const { component } = await componentizeJs(PROBE, { file: 'probe.js' });
    const got = await inComponent(component);
    const want = await inNode(PROBE);
    // A DOMException in Node (atob, structuredClone) keeps its name; the rest are TypeError/RangeError.
    expect(got).toEqual(want);
    // What the probe found, spelled out where it matters most.
    expect(got.types).toEqual(Array(7).fill('function'));
    expect(got.decodeMultiByte).toBe('aé€😀');
    expect(got.decodeInvalid).toContainEqual([0xfffd, 0x28]);
    expect(got.decodeFatal).toEqual(['threw TypeError', true]);
  });

  it('an author’s own global of the same name replaces capsule’s', async () => {
    const { component } = await componentizeJs(
      "globalThis.URL = function URL() { this.mine = true; }; export function run() { return JSON.stringify([new URL('x').mine, typeof TextDecoder]); }",
    );
    expect(await inComponent(component)).toEqual([true, 'function']);
  });

  it('control: QuickJS alone has none of them (the test above can fail)', async () => {
    const { component } = await componentize({
      witPath: defaultWitPath(),
      jsSource:
        "export function run() { return JSON.stringify(['TextEncoder', 'TextDecoder', 'URL', 'structuredClone'].map((n) => typeof globalThis[n])); }",
      sync: true,
    });
    expect(await inComponent(new Uint8Array(component))).toEqual(Array(4).fill('undefined'));
  });

  it('an error in the author’s module keeps its own line number', async () => {
    const { component } = await componentizeJs(
      'export function run() {\n  return new Error("x").stack;\n}\n',
    );
    const r = await runner.runRaw(rawSpec('probe.wasm', component, '{}'));
    expect(Buffer.from(r.stdout).toString('utf8')).toMatch(/:2\b/);
  });
});
