// Reads {"text": "..."} on stdin, prints {"lines", "words", "chars"} on stdout.
let raw = '';
for await (const chunk of process.stdin) raw += chunk;
const { text } = JSON.parse(raw);
const words = text.split(/\s+/).filter(Boolean).length;
const lines = text === '' ? 0 : text.split('\n').length;
process.stdout.write(`${JSON.stringify({ lines, words, chars: [...text].length })}\n`);
