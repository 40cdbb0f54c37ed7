// The web globals a capability author reaches for first, for the JavaScript world of Wasm components
// (QuickJS has none of them): TextEncoder, TextDecoder (UTF-8), URL, URLSearchParams, structuredClone.
// capsule builds it into every component it makes from JavaScript, evaluated before the author's
// module; a global the engine already has is left as it is. Plain ES2020, no imports.

const define = (name, value) => {
  if (typeof globalThis[name] === 'undefined')
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
};

// ---- UTF-8 ---------------------------------------------------------------------------------------

class TextEncoder {
  get encoding() {
    return 'utf-8';
  }

  encode(input = '') {
    const text = String(input);
    const out = new Uint8Array(text.length * 3);
    return out.slice(0, this.encodeInto(text, out).written);
  }

  encodeInto(input, dest) {
    const text = String(input);
    let read = 0;
    let written = 0;
    for (let i = 0; i < text.length; i++) {
      let cp = text.charCodeAt(i);
      let units = 1;
      if (cp >= 0xd800 && cp <= 0xdbff && i + 1 < text.length) {
        const next = text.charCodeAt(i + 1);
        if (next >= 0xdc00 && next <= 0xdfff) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (next - 0xdc00);
          units = 2;
        }
      }
      // A lone surrogate is not a scalar value: it becomes U+FFFD.
      if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;
      const size = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
      if (written + size > dest.length) break;
      if (size === 1) dest[written++] = cp;
      else if (size === 2) {
        dest[written++] = 0xc0 | (cp >> 6);
        dest[written++] = 0x80 | (cp & 0x3f);
      } else if (size === 3) {
        dest[written++] = 0xe0 | (cp >> 12);
        dest[written++] = 0x80 | ((cp >> 6) & 0x3f);
        dest[written++] = 0x80 | (cp & 0x3f);
      } else {
        dest[written++] = 0xf0 | (cp >> 18);
        dest[written++] = 0x80 | ((cp >> 12) & 0x3f);
        dest[written++] = 0x80 | ((cp >> 6) & 0x3f);
        dest[written++] = 0x80 | (cp & 0x3f);
      }
      read += units;
      i += units - 1;
    }
    return { read, written };
  }
}

const UTF8_LABELS = [
  'utf-8',
  'utf8',
  'unicode-1-1-utf-8',
  'unicode11utf8',
  'unicode20utf8',
  'x-unicode20utf8',
];

function bytesOf(input) {
  if (input === undefined) return new Uint8Array(0);
  if (input instanceof ArrayBuffer) return new Uint8Array(input);
  if (ArrayBuffer.isView(input)) return new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
  throw new TypeError('TextDecoder.decode: input must be an ArrayBuffer or a view of one');
}

class TextDecoder {
  #fatal;
  #ignoreBOM;
  // The decoder's state between calls with { stream: true } (the WHATWG UTF-8 decoder).
  #cp = 0;
  #needed = 0;
  #seen = 0;
  #lower = 0x80;
  #upper = 0xbf;
  #bomSeen = false;

  constructor(label = 'utf-8', options = {}) {
    const name = String(label).trim().toLowerCase();
    if (!UTF8_LABELS.includes(name))
      throw new RangeError(`TextDecoder: "${label}" is not supported (only UTF-8 is)`);
    this.#fatal = Boolean(options.fatal);
    this.#ignoreBOM = Boolean(options.ignoreBOM);
  }

  get encoding() {
    return 'utf-8';
  }

  get fatal() {
    return this.#fatal;
  }

  get ignoreBOM() {
    return this.#ignoreBOM;
  }

  decode(input, options = {}) {
    const bytes = bytesOf(input);
    const stream = Boolean(options.stream);
    const units = [];
    let out = '';
    const flush = () => {
      out += String.fromCharCode.apply(null, units);
      units.length = 0;
    };
    const emit = (cp) => {
      if (!this.#bomSeen) {
        this.#bomSeen = true;
        if (cp === 0xfeff && !this.#ignoreBOM) return;
      }
      if (cp > 0xffff) {
        cp -= 0x10000;
        units.push(0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else units.push(cp);
      if (units.length > 8192) flush();
    };
    const error = () => {
      if (this.#fatal) {
        this.#reset();
        throw new TypeError('TextDecoder: the input is not valid UTF-8');
      }
      emit(0xfffd);
    };
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i];
      if (this.#needed === 0) {
        if (b <= 0x7f) emit(b);
        else if (b >= 0xc2 && b <= 0xdf) {
          this.#needed = 1;
          this.#cp = b & 0x1f;
        } else if (b >= 0xe0 && b <= 0xef) {
          if (b === 0xe0) this.#lower = 0xa0;
          if (b === 0xed) this.#upper = 0x9f;
          this.#needed = 2;
          this.#cp = b & 0xf;
        } else if (b >= 0xf0 && b <= 0xf4) {
          if (b === 0xf0) this.#lower = 0x90;
          if (b === 0xf4) this.#upper = 0x8f;
          this.#needed = 3;
          this.#cp = b & 0x7;
        } else error();
        continue;
      }
      if (b < this.#lower || b > this.#upper) {
        // The byte starts something new: the broken sequence is one U+FFFD, the byte is read again.
        this.#reset();
        error();
        i--;
        continue;
      }
      this.#lower = 0x80;
      this.#upper = 0xbf;
      this.#cp = (this.#cp << 6) | (b & 0x3f);
      if (++this.#seen === this.#needed) {
        const cp = this.#cp;
        this.#reset();
        emit(cp);
      }
    }
    if (!stream) {
      if (this.#needed !== 0) {
        this.#reset();
        error();
      }
      this.#bomSeen = false;
    }
    flush();
    return out;
  }

  #reset() {
    this.#cp = 0;
    this.#needed = 0;
    this.#seen = 0;
    this.#lower = 0x80;
    this.#upper = 0xbf;
  }
}

// ---- URLSearchParams -----------------------------------------------------------------------------

const HEX = '0123456789ABCDEF';

/** Percent-encodes the UTF-8 bytes of `text`, keeping the characters `keep` accepts. */
function percentEncode(text, keep, spaceAsPlus = false) {
  let out = '';
  const bytes = new TextEncoder().encode(text);
  for (const b of bytes) {
    if (spaceAsPlus && b === 0x20) out += '+';
    else if (b < 0x80 && keep(b)) out += String.fromCharCode(b);
    else out += `%${HEX[b >> 4]}${HEX[b & 15]}`;
  }
  return out;
}

function percentDecode(text) {
  const bytes = [];
  const raw = new TextEncoder().encode(text);
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i];
    const h = (c) =>
      c >= 0x30 && c <= 0x39 ? c - 0x30 : (c | 0x20) >= 0x61 && (c | 0x20) <= 0x66 ? (c | 0x20) - 0x57 : -1;
    if (b === 0x25 && i + 2 < raw.length && h(raw[i + 1]) >= 0 && h(raw[i + 2]) >= 0) {
      bytes.push(h(raw[i + 1]) * 16 + h(raw[i + 2]));
      i += 2;
    } else bytes.push(b);
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

const isFormSafe = (b) =>
  (b >= 0x30 && b <= 0x39) ||
  (b >= 0x41 && b <= 0x5a) ||
  (b >= 0x61 && b <= 0x7a) ||
  b === 0x2a ||
  b === 0x2d ||
  b === 0x2e ||
  b === 0x5f;

class URLSearchParams {
  #list = [];
  #url = null;

  constructor(init = '') {
    if (typeof init === 'object' && init !== null) {
      if (typeof init[Symbol.iterator] === 'function') {
        for (const pair of init) {
          const [name, value, ...rest] = [...pair];
          if (value === undefined || rest.length > 0)
            throw new TypeError('URLSearchParams: each pair must have two items');
          this.#list.push([String(name), String(value)]);
        }
      } else for (const key of Object.keys(init)) this.#list.push([key, String(init[key])]);
    } else this.#parse(String(init));
  }

  #parse(text) {
    this.#list = [];
    const query = text.startsWith('?') ? text.slice(1) : text;
    for (const part of query.split('&')) {
      if (part === '') continue;
      const eq = part.indexOf('=');
      const name = eq < 0 ? part : part.slice(0, eq);
      const value = eq < 0 ? '' : part.slice(eq + 1);
      this.#list.push([percentDecode(name.replace(/\+/g, ' ')), percentDecode(value.replace(/\+/g, ' '))]);
    }
  }

  /** For URL: tie these params to their URL, both ways. */
  static _attach(params, url, query) {
    params.#url = url;
    params.#parse(query);
  }

  #update() {
    if (this.#url !== null) this.#url._setQuery(this.toString());
  }

  get size() {
    return this.#list.length;
  }

  append(name, value) {
    this.#list.push([String(name), String(value)]);
    this.#update();
  }

  delete(name, value) {
    const n = String(name);
    this.#list = this.#list.filter(([k, v]) => k !== n || (value !== undefined && v !== String(value)));
    this.#update();
  }

  get(name) {
    const found = this.#list.find(([k]) => k === String(name));
    return found === undefined ? null : found[1];
  }

  getAll(name) {
    return this.#list.filter(([k]) => k === String(name)).map(([, v]) => v);
  }

  has(name, value) {
    return this.#list.some(([k, v]) => k === String(name) && (value === undefined || v === String(value)));
  }

  set(name, value) {
    const n = String(name);
    const at = this.#list.findIndex(([k]) => k === n);
    if (at < 0) this.#list.push([n, String(value)]);
    else {
      this.#list[at] = [n, String(value)];
      this.#list = this.#list.filter(([k], i) => k !== n || i === at);
    }
    this.#update();
  }

  sort() {
    // Stable, by UTF-16 code units, as the standard says.
    this.#list = this.#list
      .map((p, i) => [p, i])
      .sort((a, b) => (a[0][0] < b[0][0] ? -1 : a[0][0] > b[0][0] ? 1 : a[1] - b[1]))
      .map(([p]) => p);
    this.#update();
  }

  forEach(fn, thisArg) {
    for (const [k, v] of this.#list) fn.call(thisArg, v, k, this);
  }

  *entries() {
    for (const [k, v] of this.#list) yield [k, v];
  }

  *keys() {
    for (const [k] of this.#list) yield k;
  }

  *values() {
    for (const [, v] of this.#list) yield v;
  }

  [Symbol.iterator]() {
    return this.entries();
  }

  toString() {
    return this.#list
      .map(([k, v]) => `${percentEncode(k, isFormSafe, true)}=${percentEncode(v, isFormSafe, true)}`)
      .join('&');
  }
}

// ---- URL -----------------------------------------------------------------------------------------

const SPECIAL = { 'ftp:': 21, 'file:': null, 'http:': 80, 'https:': 443, 'ws:': 80, 'wss:': 443 };

// Characters kept as they are in each part (the WHATWG percent-encode sets, inverted, for ASCII).
const inC0 = (b) => b > 0x20 && b < 0x7f;
const keepFragment = (b) => inC0(b) && b !== 0x22 && b !== 0x3c && b !== 0x3e && b !== 0x60;
const keepQuery = (b) => inC0(b) && b !== 0x22 && b !== 0x23 && b !== 0x3c && b !== 0x3e;
const keepSpecialQuery = (b) => keepQuery(b) && b !== 0x27;
const keepPath = (b) => keepQuery(b) && b !== 0x3f && b !== 0x60 && b !== 0x7b && b !== 0x7d;
const keepUserinfo = (b) => keepPath(b) && !'/:;=@[\\]^|'.includes(String.fromCharCode(b));

function invalid(input) {
  return new TypeError(`Invalid URL: ${input}`);
}

function parseHost(text, special, input) {
  if (text.startsWith('[')) {
    if (!/^\[[0-9a-fA-F:.]+\]$/.test(text)) throw invalid(input);
    return text.toLowerCase();
  }
  if (!special) return percentEncode(text, inC0);
  const host = percentDecode(text).toLowerCase();
  // C0 controls and space are forbidden in a host, as the URL standard says.
  // eslint-disable-next-line no-control-regex
  if (host === '' || /[\u0000-\u0020#%/:<>?@[\\\]^|]/.test(host)) throw invalid(input);
  // Non-ASCII hosts need IDNA, which this small URL does not do: refused rather than guessed.
  if (/[^\u0021-\u007e]/.test(host)) throw invalid(input);
  return host;
}

function normalizePath(segments, special) {
  const out = [];
  for (const seg of segments) {
    const s = seg.toLowerCase();
    if (s === '..' || s === '.%2e' || s === '%2e.' || s === '%2e%2e') {
      if (out.length > 0) out.pop();
    } else if (s !== '.' && s !== '%2e') out.push(seg);
  }
  const last = segments[segments.length - 1]?.toLowerCase();
  if (last !== undefined && ['.', '..', '%2e', '.%2e', '%2e.', '%2e%2e'].includes(last)) out.push('');
  return out.map((seg) => percentEncode(special ? seg.replace(/\\/g, '/') : seg, keepPath)).join('/');
}

class URL {
  #protocol = '';
  #username = '';
  #password = '';
  #hostname = '';
  #port = '';
  #pathname = '';
  #search = '';
  #hash = '';
  #opaque = false;
  #params = new URLSearchParams();

  constructor(input, base) {
    // Leading and trailing C0 controls and spaces are cut off, as the URL standard says.
    const text = String(input)
      // eslint-disable-next-line no-control-regex
      .replace(/^[\u0000-\u0020]+|[\u0000-\u0020]+$/g, '')
      .replace(/[\t\n\r]/g, '');
    const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(text);
    if (scheme !== null) this.#parseAbsolute(text, scheme[1].toLowerCase() + ':', String(input));
    else {
      if (base === undefined) throw invalid(input);
      const b = base instanceof URL ? base : new URL(base);
      this.#parseRelative(text, b, String(input));
    }
    URLSearchParams._attach(this.#params, this, this.#search);
  }

  static canParse(input, base) {
    try {
      new URL(input, base);
      return true;
    } catch {
      return false;
    }
  }

  #parseAbsolute(text, protocol, input) {
    this.#protocol = protocol;
    let rest = text.slice(protocol.length);
    const special = protocol in SPECIAL;
    rest = this.#takeHashAndQuery(rest, special);
    if (special ? /^[/\\]{2}/.test(rest) || protocol !== 'file:' : rest.startsWith('//')) {
      if (special) rest = rest.replace(/^[/\\]*/, '');
      else rest = rest.slice(2);
      const end = rest.search(special ? /[/\\]/ : /\//);
      const authority = end < 0 ? rest : rest.slice(0, end);
      const path = end < 0 ? '' : rest.slice(end);
      this.#parseAuthority(authority, special, input);
      this.#setPath(path, special);
    } else if (special) {
      // file:/x and file:x
      this.#setPath(rest.startsWith('/') || rest.startsWith('\\') ? rest : `/${rest}`, true);
    } else if (rest.startsWith('/')) {
      this.#setPath(rest, false);
    } else {
      this.#opaque = true;
      this.#pathname = percentEncode(rest, (b) => b >= 0x20 && b < 0x7f);
    }
  }

  #parseRelative(text, base, input) {
    this.#protocol = base.protocol;
    const special = this.#protocol in SPECIAL;
    if (base.#opaque && !text.startsWith('#')) throw invalid(input);
    const copy = (what) => {
      this.#username = base.#username;
      this.#password = base.#password;
      this.#hostname = base.#hostname;
      this.#port = base.#port;
      this.#opaque = base.#opaque;
      if (what === 'path') this.#pathname = base.#pathname;
    };
    if (special ? /^[/\\]{2}/.test(text) : text.startsWith('//')) {
      this.#parseAbsolute(`${this.#protocol}${text}`, this.#protocol, input);
      return;
    }
    const rest = this.#takeHashAndQuery(text, special);
    copy('path');
    if (rest === '') {
      if (!text.startsWith('?') && !text.includes('?')) this.#search = base.#search;
      if (text === '') this.#hash = '';
      return;
    }
    if (rest.startsWith('/') || (special && rest.startsWith('\\'))) {
      this.#setPath(rest, special);
      return;
    }
    const dir = base.#pathname.slice(0, base.#pathname.lastIndexOf('/') + 1);
    this.#setPath(`${dir === '' ? '/' : dir}${rest}`, special);
  }

  /** Cuts `#…` and `?…` off `rest` (setting hash and search) and returns what is before them. */
  #takeHashAndQuery(rest, special) {
    const h = rest.indexOf('#');
    if (h >= 0) {
      const frag = rest.slice(h + 1);
      this.#hash = frag === '' ? '' : `#${percentEncode(frag, keepFragment)}`;
      rest = rest.slice(0, h);
    } else this.#hash = '';
    const q = rest.indexOf('?');
    if (q >= 0) {
      const query = rest.slice(q + 1);
      this.#search = query === '' ? '' : `?${percentEncode(query, special ? keepSpecialQuery : keepQuery)}`;
      rest = rest.slice(0, q);
    } else this.#search = '';
    return rest;
  }

  #parseAuthority(authority, special, input) {
    let hostPort = authority;
    const at = authority.lastIndexOf('@');
    if (at >= 0) {
      const info = authority.slice(0, at);
      hostPort = authority.slice(at + 1);
      const colon = info.indexOf(':');
      this.#username = percentEncode(colon < 0 ? info : info.slice(0, colon), keepUserinfo);
      this.#password = colon < 0 ? '' : percentEncode(info.slice(colon + 1), keepUserinfo);
    }
    const portAt = hostPort.lastIndexOf(':');
    let host = hostPort;
    if (portAt >= 0 && !hostPort.slice(portAt).includes(']')) {
      host = hostPort.slice(0, portAt);
      const port = hostPort.slice(portAt + 1);
      if (!/^\d*$/.test(port) || Number(port) > 65535) throw invalid(input);
      this.#port = port === '' || Number(port) === SPECIAL[this.#protocol] ? '' : String(Number(port));
    }
    if (host === '' && special && this.#protocol !== 'file:') throw invalid(input);
    this.#hostname = host === '' ? '' : parseHost(host, special, input);
  }

  #setPath(path, special) {
    const segments = (special ? path.replace(/\\/g, '/') : path).split('/').slice(1);
    const joined = normalizePath(segments, special);
    this.#pathname = path === '' && !special ? '' : `/${joined}`;
  }

  _setQuery(query) {
    this.#search = query === '' ? '' : `?${query}`;
  }

  get protocol() {
    return this.#protocol;
  }
  get username() {
    return this.#username;
  }
  get password() {
    return this.#password;
  }
  get hostname() {
    return this.#hostname;
  }
  get port() {
    return this.#port;
  }
  get host() {
    return this.#port === '' ? this.#hostname : `${this.#hostname}:${this.#port}`;
  }
  get pathname() {
    return this.#pathname;
  }
  get search() {
    return this.#search;
  }
  set search(value) {
    const q = String(value).replace(/^\?/, '');
    this.#search =
      q === '' ? '' : `?${percentEncode(q, this.#protocol in SPECIAL ? keepSpecialQuery : keepQuery)}`;
    URLSearchParams._attach(this.#params, this, this.#search);
  }
  get searchParams() {
    return this.#params;
  }
  get hash() {
    return this.#hash;
  }
  set hash(value) {
    const h = String(value).replace(/^#/, '');
    this.#hash = h === '' ? '' : `#${percentEncode(h, keepFragment)}`;
  }
  get origin() {
    const p = this.#protocol;
    return p in SPECIAL && p !== 'file:' ? `${p}//${this.host}` : 'null';
  }
  get href() {
    const auth =
      this.#username !== '' || this.#password !== ''
        ? `${this.#username}${this.#password !== '' ? `:${this.#password}` : ''}@`
        : '';
    const hasHost = this.#hostname !== '' || this.#protocol === 'file:';
    const slashes = hasHost || this.#protocol in SPECIAL ? '//' : '';
    return `${this.#protocol}${slashes}${auth}${this.host}${this.#pathname}${this.#search}${this.#hash}`;
  }
  toString() {
    return this.href;
  }
  toJSON() {
    return this.href;
  }
}

// ---- structuredClone ----------------------------------------------------------------------------

function dataCloneError(what) {
  const err = new Error(`${what} could not be cloned.`);
  err.name = 'DataCloneError';
  return err;
}

function structuredClone(value) {
  const seen = new Map();
  const clone = (v) => {
    if (typeof v === 'function') throw dataCloneError(String(v).slice(0, 40));
    if (typeof v === 'symbol') throw dataCloneError(String(v));
    if (v === null || typeof v !== 'object') return v;
    if (seen.has(v)) return seen.get(v);
    const tag = Object.prototype.toString.call(v).slice(8, -1);
    let out;
    if (Array.isArray(v)) {
      out = new Array(v.length);
      seen.set(v, out);
      for (const k of Object.keys(v)) out[k] = clone(v[k]);
      return out;
    }
    switch (tag) {
      case 'Date':
        out = new Date(v.getTime());
        break;
      case 'RegExp':
        out = new RegExp(v.source, v.flags);
        break;
      case 'Boolean':
      case 'Number':
      case 'String':
        out = Object(v.valueOf());
        break;
      case 'ArrayBuffer':
        out = v.slice(0);
        break;
      case 'DataView':
        out = new DataView(clone(v.buffer), v.byteOffset, v.byteLength);
        break;
      case 'Map':
        out = new Map();
        seen.set(v, out);
        for (const [k, x] of v) out.set(clone(k), clone(x));
        return out;
      case 'Set':
        out = new Set();
        seen.set(v, out);
        for (const x of v) out.add(clone(x));
        return out;
      case 'Error': {
        const Ctor =
          { EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError }[v.name] ?? Error;
        out = new Ctor(v.message);
        seen.set(v, out);
        if (v.stack !== undefined) out.stack = String(v.stack);
        if ('cause' in v) out.cause = clone(v.cause);
        return out;
      }
      default:
        if (ArrayBuffer.isView(v)) {
          out = new v.constructor(clone(v.buffer), v.byteOffset, v.length);
          break;
        }
        if (tag !== 'Object') throw dataCloneError(tag);
        out = {};
        seen.set(v, out);
        for (const k of Object.keys(v)) out[k] = clone(v[k]);
        return out;
    }
    seen.set(v, out);
    return out;
  };
  return clone(value);
}

define('TextEncoder', TextEncoder);
define('TextDecoder', TextDecoder);
define('URLSearchParams', URLSearchParams);
define('URL', URL);
define('structuredClone', structuredClone);
