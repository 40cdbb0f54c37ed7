import { spawnSync } from 'node:child_process';
import { appendFile, cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DockerodeEngine } from '../../../../src/runners/docker/dockerode-engine.js';
import { defaultRuntimesDir, ImageBuilder } from '../../../../src/runners/docker/images.js';
import type { ImageRecipe } from '../../../../src/runners/docker/images.js';
import { dockerForTests } from './helpers.js';

// Builds a throwaway image from a copy of the busybox recipe (its own tag, removed afterwards), to prove
// the offline build, its progress output, and that a changed recipe triggers a rebuild.
describe('ImageBuilder', () => {
  let engine: DockerodeEngine;
  let runtimes: string;
  const tag = `capsule-test/busybox:${process.pid}`;
  const recipe: ImageRecipe = { tag, folder: 'busybox', withNode: false };

  beforeAll(async () => {
    ({ engine } = await dockerForTests());
    runtimes = await mkdtemp(path.join(tmpdir(), 'capsule-runtimes-'));
    await cp(path.join(defaultRuntimesDir(), 'busybox'), path.join(runtimes, 'busybox'), { recursive: true });
    // Its own label: never the same image id as the real capsule/busybox:1.
    await appendFile(
      path.join(runtimes, 'busybox', 'Dockerfile'),
      `\nLABEL capsule.test.pid="${process.pid}"\n`,
    );
  });

  afterAll(async () => {
    await engine.removeImage(tag);
    await rm(runtimes, { recursive: true, force: true });
  });

  it('builds a missing image offline with progress, then finds it current', async () => {
    const progress: string[] = [];
    const builder = new ImageBuilder({ engine, runtimesDir: runtimes, recipes: [recipe] });
    await builder.ensure(tag, (m) => progress.push(m));
    expect(await engine.imageExists(tag)).toBe(true);
    expect(progress.join('\n')).toMatch(/staging build context/);
    expect(progress.join('\n')).toMatch(/Step \d+\/\d+ : FROM scratch/);
    expect(progress.join('\n')).toMatch(/built in/);

    const again: string[] = [];
    await new ImageBuilder({ engine, runtimesDir: runtimes, recipes: [recipe] }).ensure(tag, (m) =>
      again.push(m),
    );
    expect(again).toEqual([]);
  });

  it('rebuilds when the recipe changed, and drops the stale image but never another tag', async () => {
    const before = await engine.imageInfo(tag);
    const realBefore = await engine.imageInfo('capsule/busybox:1');
    await appendFile(path.join(runtimes, 'busybox', 'Dockerfile'), '\nLABEL capsule.test.changed="1"\n');
    const progress: string[] = [];
    await new ImageBuilder({ engine, runtimesDir: runtimes, recipes: [recipe] }).ensure(tag, (m) =>
      progress.push(m),
    );
    const after = await engine.imageInfo(tag);
    expect(progress.join('\n')).toMatch(/inputs changed/);
    expect(after?.labels['capsule.test.changed']).toBe('1');
    expect(after?.id).not.toBe(before?.id);
    expect(await engine.imageExists(before?.id ?? 'none')).toBe(false);
    expect((await engine.imageInfo('capsule/busybox:1'))?.id).toBe(realBefore?.id);
  });

  it('keeps an old image that still carries another tag', async () => {
    const other = `${tag}-other`;
    const shared = await engine.imageInfo(tag);
    // A second tag on the current image, then a change: the rebuild must not delete the shared image.
    expect(spawnSync('docker', ['tag', tag, other]).status).toBe(0);
    try {
      await appendFile(path.join(runtimes, 'busybox', 'Dockerfile'), '\nLABEL capsule.test.changed="2"\n');
      await new ImageBuilder({ engine, runtimesDir: runtimes, recipes: [recipe] }).ensure(tag);
      expect((await engine.imageInfo(other))?.id).toBe(shared?.id);
    } finally {
      await engine.removeImage(other);
    }
  });

  it('a broken recipe is a RUNNER_FAILED error naming its Dockerfile', async () => {
    const broken = await mkdtemp(path.join(tmpdir(), 'capsule-runtimes-broken-'));
    try {
      await cp(path.join(defaultRuntimesDir(), 'busybox'), path.join(broken, 'busybox'), { recursive: true });
      await writeFile(path.join(broken, 'busybox', 'Dockerfile'), 'FROM scratch\nCOPY no-such-dir/ /\n');
      const builder = new ImageBuilder({
        engine,
        runtimesDir: broken,
        recipes: [{ ...recipe, tag: `${tag}-broken` }],
      });
      await expect(builder.ensure(`${tag}-broken`)).rejects.toMatchObject({
        code: 'RUNNER_FAILED',
        details: { file: path.join(broken, 'busybox', 'Dockerfile') },
      });
    } finally {
      await rm(broken, { recursive: true, force: true });
      await engine.removeImage(`${tag}-broken`);
    }
  });
});

const cli = fileURLToPath(new URL('../../../../dist/cli/main.js', import.meta.url));

// Through the built CLI (npm run build; scripts/test.mjs does it).
describe('capsule images', () => {
  beforeAll(async () => {
    const { builder } = await dockerForTests();
    await builder.ensure('capsule/busybox:1');
    await builder.ensure('capsule/node:1');
  });

  it('list --json shows both recipes present', () => {
    const r = spawnSync(process.execPath, [cli, 'images', 'list', '--json'], { encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual([
      { tag: 'capsule/busybox:1', folder: 'runtimes/docker/busybox', present: true },
      { tag: 'capsule/node:1', folder: 'runtimes/docker/node', present: true },
    ]);
  });

  it('build skips current images and reports it; an unknown tag is a usage error', () => {
    const ok = spawnSync(process.execPath, [cli, 'images', 'build', 'capsule/busybox:1'], {
      encoding: 'utf8',
    });
    expect(ok.status).toBe(0);
    expect(ok.stderr).toMatch(/capsule\/busybox:1: present/);
    const bad = spawnSync(process.execPath, [cli, 'images', 'build', 'nope:1'], { encoding: 'utf8' });
    expect(bad.status).toBe(64);
    expect(bad.stderr).toMatch(/unknown image nope:1/);
    expect(bad.stderr).not.toMatch(/at .*\.js:\d+/);
  });

  it('without an engine: exit 69 and one line that says how to get one, no stack trace', () => {
    const r = spawnSync(process.execPath, [cli, 'images', 'list'], {
      encoding: 'utf8',
      env: { ...process.env, DOCKER_HOST: 'unix:///nonexistent/docker.sock' },
    });
    expect(r.status).toBe(69);
    expect(r.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(
        /no Docker engine answers at unix:\/\/\/nonexistent\/docker\.sock: start one with .*provision-docker\.sh/,
      ),
    ]);
  });
});
