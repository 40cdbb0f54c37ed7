// A JavaScript-authored Wasm capability that works on files: it reads a text file from its
// read-only grant (data/notes, preopened at /data/notes) and writes a digest of it as JSON into
// its read-write grant (data/digests, at /data/digests). Input: { "file": "notes.txt" }.
// Files come through wasi:filesystem (see docs/runners.md, "The JavaScript authoring world").
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

/** The preopened folder the guest sees at `guestPath` (a granted folder), or an error. */
function folder(guestPath) {
  const found = getDirectories().find(([, p]) => p === guestPath);
  if (found === undefined) throw new Error(`${guestPath} is not granted`);
  return found[0];
}

// UTF-8 through the web globals capsule builds into every JavaScript component.
const decoder = new TextDecoder();
const encoder = new TextEncoder();

function readText(dir, name) {
  const file = dir.openAt({}, name, {}, { read: true });
  let text = '';
  let offset = 0;
  for (;;) {
    const [bytes, end] = file.read(65536, offset);
    // stream: a character cut between two reads is decoded whole by the next one.
    text += decoder.decode(bytes, { stream: !(end || bytes.length === 0) });
    offset += bytes.length;
    if (end || bytes.length === 0) break;
  }
  return text;
}

function writeText(dir, name, text) {
  const file = dir.openAt({}, name, { create: true, truncate: true }, { write: true });
  file.writeViaStream(0).blockingWriteAndFlush(encoder.encode(text));
}

export function run(input) {
  const { file } = JSON.parse(input);
  try {
    return digestOf(file);
  } catch (err) {
    // A refused or failed call throws its wasi:filesystem error-code (e.g. "not-permitted").
    return `${JSON.stringify({ file, error: err.payload ?? String(err) })}\n`;
  }
}

function digestOf(file) {
  const text = readText(folder('/data/notes'), file);
  const words = text.split(/\s+/).filter((w) => w !== '');
  const counts = new Map();
  for (const w of words) {
    const key = w.toLowerCase().replace(/[^\p{L}\p{N}]/gu, '');
    if (key !== '') counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const top = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 3);
  const digest = {
    file,
    lines: text === '' ? 0 : text.split('\n').length - (text.endsWith('\n') ? 1 : 0),
    words: words.length,
    top: top.map(([word, n]) => ({ word, n })),
  };
  const written = `${file}.digest.json`;
  writeText(folder('/data/digests'), written, `${JSON.stringify(digest, null, 2)}\n`);
  return `${JSON.stringify({ ...digest, written: `/data/digests/${written}` })}\n`;
}
