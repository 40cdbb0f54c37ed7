// Registry scan time for 1,000 generated capabilities: cold (a fresh Registry: every manifest parsed,
// every input schema compiled, every folder hashed) and warm (the same Registry scanning again).
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stats } from './stats.mjs';

export async function benchRegistry({ count = 1000, rounds = 5 } = {}) {
  const { Registry } = await import('../dist/registry/registry.js');
  const root = await mkdtemp(path.join(tmpdir(), 'capsule-bench-registry-'));
  try {
    for (let i = 0; i < count; i++) {
      const name = `cap-${String(i).padStart(4, '0')}`;
      const dir = path.join(root, 'capabilities', name);
      await mkdir(dir, { recursive: true });
      const manifest = {
        schemaVersion: 1,
        name,
        description: `generated capability ${i}`,
        environment: 'shell',
        entry: 'run.sh',
        interpreter: 'sh',
        inputSchema: { type: 'object', properties: { n: { type: 'integer', maximum: i + 1 } } },
      };
      await writeFile(path.join(dir, 'capability.json'), JSON.stringify(manifest));
      await writeFile(path.join(dir, 'run.sh'), `echo ${i}\n`);
    }
    const cold = [];
    const warm = [];
    for (let r = 0; r < rounds; r++) {
      const registry = new Registry({ roots: ['capabilities'], projectRoot: root });
      let t = performance.now();
      const first = await registry.scan();
      cold.push(performance.now() - t);
      if (first.capabilities.length !== count)
        throw new Error(`expected ${count} capabilities, got ${first.capabilities.length}`);
      t = performance.now();
      await registry.scan();
      warm.push(performance.now() - t);
    }
    return [
      { name: `registry: scan ${count} capabilities, cold`, ...stats(cold) },
      { name: `registry: scan ${count} capabilities, warm`, ...stats(warm) },
    ];
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}
