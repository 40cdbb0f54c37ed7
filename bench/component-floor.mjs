// The floor under a component call: instantiating the component's core modules, linked exactly
// as the transpiled glue links them, and nothing else (no glue, no host, no call). A module whose
// memory capsule supplies (memoryFromHost) gets a new memory for each instantiation, as the module
// as transpiled would create its own.
// Run as a worker (workerData.componentFloor) it instantiates repeatedly on its own thread, for
// the throughput floor with every thread busy.
import { parentPort, workerData } from 'node:worker_threads';

/**
 * Instantiates the component once through its glue, recording each core instantiation and where
 * every import came from (an earlier core instance's export, or a value of the glue's own).
 */
export function recordLinkPlan(glue, modules, memories = {}) {
  const limitsOf = new Map(Object.entries(memories).map(([name, limits]) => [modules[name], limits]));
  const steps = [];
  const origin = new Map();
  // Instantiation only looks host imports up; nothing is called before run().
  const host = new Proxy({}, { get: () => new Proxy({}, { get: () => class Unused {} }) });
  glue.instantiate(
    (name) => modules[name],
    host,
    (module, imports) => {
      const memory = limitsOf.get(module);
      const instance = new WebAssembly.Instance(module, withMemory(imports, memory));
      const links = [];
      for (const [ns, obj] of Object.entries(imports ?? {}))
        for (const [name, value] of Object.entries(obj)) {
          const from = origin.get(value);
          links.push(from === undefined ? { ns, name, value } : { ns, name, from });
        }
      const step = steps.length;
      for (const [name, value] of Object.entries(instance.exports))
        if (!origin.has(value)) origin.set(value, [step, name]);
      steps.push({ module, links, memory });
      return instance;
    },
  );
  return steps;
}

/** A fresh set of core instances following the plan: returns the exports of each. */
export function instantiateCores(steps) {
  const made = [];
  for (const { module, links, memory } of steps) {
    const imports = {};
    for (const l of links) (imports[l.ns] ??= {})[l.name] = l.from ? made[l.from[0]][l.from[1]] : l.value;
    made.push(new WebAssembly.Instance(module, withMemory(imports, memory)).exports);
  }
  return made;
}

function withMemory(imports, limits) {
  return limits === undefined ? imports : { ...imports, ...ownMemory({ memory: limits }) };
}

/** The floor's memory for a module capsule supplies one to: a new one per instantiation, as the module would make. */
export function ownMemory(prepared) {
  return prepared.memory === undefined
    ? {}
    : { 'capsule:host': { memory: new WebAssembly.Memory(prepared.memory) } };
}

if (parentPort !== null && workerData?.componentFloor === true) {
  const { setFlagsFromString } = await import('node:v8');
  setFlagsFromString('--experimental-wasm-extended-const');
  const glue = await import(workerData.jsUrl);
  const steps = recordLinkPlan(glue, workerData.modules, workerData.memories);
  for (let i = 0; i < 20; i++) instantiateCores(steps);
  parentPort.once('message', () => {
    for (let i = 0; i < workerData.count; i++) instantiateCores(steps);
    parentPort.postMessage('done');
  });
  parentPort.postMessage('ready');
}
