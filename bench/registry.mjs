// Registry scan time for 1,000 generated capabilities. Without an index (every manifest parsed, every
// input schema checked, every folder read and hashed): a fresh Registry, and the same one again. With the
// per-user scan index (what capsule runs with): cold is a fresh Registry and index object in a new process's
// position (the index file from an earlier scan on disk, nothing in memory), warm is the same Registry again.
// Manifests are still read and validated every scan; only unchanged folders skip being read and hashed.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stats } from './stats.mjs';

export async function benchRegistry({ count = 1000, rounds = 5 } = {}) {
  const { Registry } = await import('../dist/registry/registry.js');
  const { ScanIndex } = await import('../dist/registry/scan-index.js');
  const { StateKey } = await import('../dist/project/state-key.js');
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
    // Files changed in the last 2 s are not remembered by the index (coarse timestamps): let them settle.
    await new Promise((r) => setTimeout(r, 2100));
    const indexFile = path.join(root, 'state', 'registry-index.json');
    // Each index object gets its own key object, as a new process would (the key file is read once each):
    // every entry's MAC is checked when an index is loaded and made when one is remembered.
    const index = () =>
      new ScanIndex(indexFile, { key: new StateKey({ stateDir: path.join(root, 'state') }) });
    const check = (scan) => {
      if (scan.capabilities.length !== count)
        throw new Error(`expected ${count} capabilities, got ${scan.capabilities.length}`);
    };
    const plainCold = [];
    const plainWarm = [];
    const cold = [];
    const warm = [];
    for (let r = 0; r < rounds; r++) {
      const plain = new Registry({ roots: ['capabilities'], projectRoot: root });
      let t = performance.now();
      check(await plain.scan());
      plainCold.push(performance.now() - t);
      t = performance.now();
      await plain.scan();
      plainWarm.push(performance.now() - t);
      if (r === 0) {
        // Fills the index (this scan costs what a scan without one does).
        await new Registry({
          roots: ['capabilities'],
          projectRoot: root,
          index: index(),
        }).scan();
      }
      const indexed = new Registry({
        roots: ['capabilities'],
        projectRoot: root,
        index: index(),
      });
      t = performance.now();
      check(await indexed.scan());
      cold.push(performance.now() - t);
      t = performance.now();
      check(await indexed.scan());
      warm.push(performance.now() - t);
    }
    return [
      { name: `registry: scan ${count} capabilities, no index, cold`, ...stats(plainCold), isFloor: true },
      { name: `registry: scan ${count} capabilities, no index, warm`, ...stats(plainWarm) },
      {
        name: `registry: scan ${count} capabilities, indexed, cold`,
        ...stats(cold),
        floor: `registry: scan ${count} capabilities, no index, cold`,
      },
      {
        name: `registry: scan ${count} capabilities, indexed, warm`,
        ...stats(warm),
        floor: `registry: scan ${count} capabilities, no index, cold`,
      },
    ];
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}
