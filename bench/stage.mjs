// What staging the approved bytes adds to a run, for the shipped examples: the first copy in a process
// (every `capsule run`) and a reused copy (later calls of an MCP or library session), each against the
// resolve + hash that every call already pays (registry.get).
import { stats } from './stats.mjs';

export async function benchStage({ root, rounds = 30 } = {}) {
  const { Registry } = await import('../dist/registry/registry.js');
  const { CapabilityStage } = await import('../dist/executor/stage.js');
  const registry = new Registry({ roots: ['capabilities'], projectRoot: root });
  const rows = [];
  for (const name of ['hello', 'hello-docker', 'shout', 'shout-wasm', 'word-count']) {
    const resolve = [];
    const first = [];
    const reused = [];
    for (let r = 0; r < rounds; r++) {
      let t = performance.now();
      const capability = await registry.get(name);
      resolve.push(performance.now() - t);
      const stage = new CapabilityStage();
      try {
        t = performance.now();
        await stage.stage(capability);
        first.push(performance.now() - t);
        t = performance.now();
        await stage.stage(capability);
        reused.push(performance.now() - t);
      } finally {
        await stage.close();
      }
    }
    const floor = `stage: ${name}: resolve + hash (registry.get)`;
    rows.push(
      { name: floor, ...stats(resolve), isFloor: true },
      { name: `stage: ${name}: first copy in a process`, ...stats(first), floor },
      { name: `stage: ${name}: reused copy`, ...stats(reused), floor },
    );
  }
  return rows;
}
