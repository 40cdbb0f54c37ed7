import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { containerPidsHits } from '../../../../src/runners/docker/pids-events.js';

const ID = 'c18ee02ff9de69f2744b20bf5f0bede8a4d7c9094fcbcf4d370a13326c2ec445';

/** A /proc and a /sys/fs/cgroup of files: pid 42 in `where`, its pids.events saying `max N`. */
async function host(table: string, eventsAt: string, hits: number): Promise<{ proc: string; cg: string }> {
  const base = await mkdtemp(path.join(os.tmpdir(), 'capsule-pids-'));
  const proc = path.join(base, 'proc');
  const cg = path.join(base, 'cgroup');
  await mkdir(path.join(proc, '42'), { recursive: true });
  await writeFile(path.join(proc, '42', 'cgroup'), table);
  await mkdir(path.join(cg, eventsAt), { recursive: true });
  await writeFile(path.join(cg, eventsAt, 'pids.events'), `max ${hits}\n`);
  return { proc, cg };
}

describe('containerPidsHits', () => {
  it('reads the counter of the container’s own pids cgroup (v1 and v2)', async () => {
    const v1 = await host(`8:pids:/docker/${ID}\n7:blkio:/docker/${ID}\n`, `pids/docker/${ID}`, 3);
    expect(containerPidsHits(42, ID, v1.cg, v1.proc)?.()).toBe(3);
    const v2 = await host(`0::/system.slice/docker-${ID}.scope\n`, `system.slice/docker-${ID}.scope`, 0);
    expect(containerPidsHits(42, ID, v2.cg, v2.proc)?.()).toBe(0);
  });

  it('claims nothing for a pid that is not the container’s (another namespace, or reused)', async () => {
    const other = await host('8:pids:/user.slice\n', 'pids/user.slice', 5);
    expect(containerPidsHits(42, ID, other.cg, other.proc)).toBeUndefined();
    expect(containerPidsHits(43, ID, other.cg, other.proc)).toBeUndefined();
    expect(containerPidsHits(42, 'not-an-id', other.cg, other.proc)).toBeUndefined();
  });
});
