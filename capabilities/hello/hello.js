// A JavaScript-authored Wasm capability: runs inside QuickJS in a Wasm component.
// Input: the JSON document as text. Output: the text returned becomes stdout.
export function run(input) {
  const { name } = JSON.parse(input);
  return `Hello, ${name}!\n`;
}
