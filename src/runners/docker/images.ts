import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmod,
  copyFile,
  cp,
  mkdir,
  mkdtemp,
  open,
  readFile,
  readdir,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { packageRoot } from '../../base/package-root.js';
import type tar from 'tar-fs';
import { CapsuleError } from '../../base/errors.js';
import { engineMessage } from './engine.js';
import type { DockerEngine } from './engine.js';
import { IMAGE_RECIPES, type ImageRecipe } from './image-recipes.js';

export { IMAGE_RECIPES, type ImageRecipe } from './image-recipes.js';

const execFileAsync = promisify(execFile);

const INPUTS_LABEL = 'capsule.image.inputs';

export type ImageProgress = (message: string) => void;

export interface ImageBuilderOptions {
  engine: DockerEngine;
  /** Folder holding the recipes; default: runtimes/docker of this package. */
  runtimesDir?: string | undefined;
  /** Static busybox to install; default: the first static one of /bin/busybox, /usr/bin/busybox. */
  busyboxPath?: string | undefined;
  /** Node binary for capsule/node; default: the running process's. */
  nodePath?: string | undefined;
  /** The images this builder knows; default IMAGE_RECIPES. */
  recipes?: readonly ImageRecipe[] | undefined;
}

export function defaultRuntimesDir(): string {
  return path.join(packageRoot(), 'runtimes', 'docker');
}

/** True when an ELF file has no PT_INTERP program header, i.e. needs no dynamic loader. */
export function isStaticElf(header: Buffer): boolean {
  if (header.length < 64 || header.readUInt32BE(0) !== 0x7f454c46 || header[4] !== 2) return false;
  const phoff = Number(header.readBigUInt64LE(32));
  const phentsize = header.readUInt16LE(54);
  const phnum = header.readUInt16LE(56);
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 4 > header.length) return false;
    if (header.readUInt32LE(at) === 3) return false; // PT_INTERP
  }
  return true;
}

/** Library paths from `ldd` output: `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` and the loader line. */
export function parseLddOutput(text: string): string[] {
  const paths = new Set<string>();
  for (const line of text.split('\n')) {
    const arrow = /=>\s+(\/\S+)/.exec(line);
    const bare = /^\s*(\/\S+)\s+\(0x/.exec(line);
    const p = arrow?.[1] ?? bare?.[1];
    if (p !== undefined) paths.add(p);
  }
  return [...paths];
}

/**
 * Builds capsule's sandbox images locally: stages a rootfs from host files next to the recipe's
 * Dockerfile, packs it with tar-fs and hands it to the engine. No registry is contacted.
 */
export class ImageBuilder {
  private readonly engine: DockerEngine;
  private readonly runtimesDir: string;
  private readonly busyboxPath: string | undefined;
  private readonly nodePath: string;
  private readonly recipes: readonly ImageRecipe[];
  /** Tags checked present and current by this builder. */
  private readonly verified = new Set<string>();
  /** One build per tag at a time, shared by concurrent callers. */
  private readonly inFlight = new Map<string, Promise<void>>();

  constructor(options: ImageBuilderOptions) {
    this.engine = options.engine;
    this.runtimesDir = options.runtimesDir ?? defaultRuntimesDir();
    this.busyboxPath = options.busyboxPath;
    this.nodePath = options.nodePath ?? process.execPath;
    this.recipes = options.recipes ?? IMAGE_RECIPES;
  }

  recipeFor(tag: string): ImageRecipe | undefined {
    return this.recipes.find((r) => r.tag === tag);
  }

  /**
   * Make sure `tag` exists: build it when it is one of ours and missing or built from other inputs (a new
   * host node, an edited Dockerfile); any other image must already be there (there is no registry).
   * Checked once per builder: later calls cost nothing.
   */
  async ensure(tag: string, onProgress: ImageProgress = () => {}): Promise<void> {
    if (this.verified.has(tag)) return;
    const recipe = this.recipeFor(tag);
    const image = await this.engine.imageInfo(tag);
    if (recipe === undefined) {
      if (image !== undefined) {
        this.verified.add(tag);
        return;
      }
      throw new CapsuleError(
        'RUNNER_UNAVAILABLE',
        `docker image ${tag} is not present and capsule cannot build it`,
        {
          field: 'docker.image',
          hint: `use one of ${this.recipes.map((r) => r.tag).join(', ')} (built offline on demand), or load ${tag} into the engine first (docker load / docker build)`,
        },
      );
    }
    const inputs = await this.inputsHash(recipe);
    if (image === undefined) {
      await this.build(recipe, onProgress);
    } else if (image.labels[INPUTS_LABEL] !== inputs) {
      onProgress(`${tag}: its inputs changed (recipe, busybox or node), rebuilding`);
      await this.build(recipe, onProgress);
      // Drop the old image only when the rebuild left it with no tag at all (the same image can carry
      // other tags), and never while a container uses it (without force the engine refuses).
      const old = await this.engine.imageInfo(image.id);
      if (old !== undefined && old.tags.length === 0) {
        await this.engine.removeImage(image.id, { force: false }).catch(() => {});
      }
    }
    this.verified.add(tag);
  }

  /**
   * What an image is built from: the recipe folder's Dockerfile, and the size and mtime of the host
   * binaries staged into it. Stored as a label to notice a stale image.
   */
  async inputsHash(recipe: ImageRecipe): Promise<string> {
    const hash = createHash('sha256');
    hash.update(await readFile(path.join(this.runtimesDir, recipe.folder, 'Dockerfile')));
    const busybox = await this.findBusybox();
    const bb = await stat(busybox);
    hash.update(`busybox:${busybox}:${bb.size}:${bb.mtimeMs}`);
    if (recipe.withNode) {
      const node = await stat(this.nodePath);
      hash.update(`node:${this.nodePath}:${node.size}:${node.mtimeMs}`);
    }
    return hash.digest('hex').slice(0, 16);
  }

  /** Build (or rebuild) one recipe. Concurrent calls for the same tag share one build. */
  build(recipe: ImageRecipe, onProgress: ImageProgress = () => {}): Promise<void> {
    const running = this.inFlight.get(recipe.tag);
    if (running !== undefined) return running;
    const job = this.buildOnce(recipe, onProgress).finally(() => this.inFlight.delete(recipe.tag));
    this.inFlight.set(recipe.tag, job);
    return job;
  }

  private async buildOnce(recipe: ImageRecipe, onProgress: ImageProgress): Promise<void> {
    const started = Date.now();
    const recipeDir = path.join(this.runtimesDir, recipe.folder);
    const staging = await mkdtemp(path.join(tmpdir(), `capsule-image-${recipe.folder}-`));
    try {
      onProgress(`${recipe.tag}: staging build context from ${recipeDir}`);
      await cp(recipeDir, staging, { recursive: true });
      const rootfs = path.join(staging, 'rootfs');
      const inputs = await this.inputsHash(recipe);
      await this.stageBusybox(rootfs);
      if (recipe.withNode) await this.stageNode(rootfs, onProgress);
      onProgress(`${recipe.tag}: sending context to the engine`);
      // umask 0: keep /tmp at 1777 and executables executable exactly as staged.
      // (@types/tar-fs 2 lacks `umask`, tar-fs 3 reads it.)
      const { default: tarFs } = await import('tar-fs');
      const context = tarFs.pack(staging, { umask: 0 } as tar.PackOptions) as unknown as Readable;
      await this.engine.buildImage(
        context,
        {
          tag: recipe.tag,
          labels: {
            'capsule.managed': '1',
            'capsule.image.recipe': recipe.folder,
            [INPUTS_LABEL]: inputs,
          },
        },
        (p) => onProgress(`${recipe.tag}: ${p.message}`),
      );
      onProgress(`${recipe.tag}: built in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    } catch (err) {
      if (err instanceof CapsuleError) throw err;
      throw new CapsuleError(
        'RUNNER_FAILED',
        `building docker image ${recipe.tag} failed: ${engineMessage(err)}`,
        {
          file: path.join(recipeDir, 'Dockerfile'),
          hint: 'check that the Docker engine runs (`docker info`) and that busybox-static is installed (apt-get install busybox-static)',
        },
        { cause: err },
      );
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }

  private async findBusybox(): Promise<string> {
    const candidates =
      this.busyboxPath !== undefined ? [this.busyboxPath] : ['/bin/busybox', '/usr/bin/busybox'];
    for (const candidate of candidates) {
      try {
        const handle = await open(candidate, 'r');
        try {
          const header = Buffer.alloc(4096);
          await handle.read(header, 0, header.length, 0);
          if (isStaticElf(header)) return candidate;
        } finally {
          await handle.close();
        }
      } catch {
        // not there: try the next one
      }
    }
    throw new CapsuleError(
      'RUNNER_UNAVAILABLE',
      `no statically linked busybox found (looked at ${candidates.join(', ')})`,
      {
        hint: 'install it: apt-get install -y busybox-static (scripts/provision-docker.sh does this)',
      },
    );
  }

  private async stageBusybox(rootfs: string): Promise<void> {
    const busybox = await this.findBusybox();
    await mkdir(path.join(rootfs, 'bin'), { recursive: true });
    await copyFile(busybox, path.join(rootfs, 'bin/busybox'));
    await chmod(path.join(rootfs, 'bin/busybox'), 0o755);
    const { stdout } = await execFileAsync(busybox, ['--list-full']);
    for (const applet of stdout.split('\n').map((l) => l.trim())) {
      if (applet === '' || applet.includes('..') || applet === 'bin/busybox') continue;
      const linkPath = path.join(rootfs, applet);
      await mkdir(path.dirname(linkPath), { recursive: true });
      // Absolute target: valid wherever the link sits.
      await symlink('/bin/busybox', linkPath).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
      });
    }
    await mkdir(path.join(rootfs, 'etc'), { recursive: true });
    await writeFile(
      path.join(rootfs, 'etc/passwd'),
      'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/false\n',
    );
    await writeFile(path.join(rootfs, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
    for (const dir of ['tmp', 'capability', 'proc', 'dev', 'sys'])
      await mkdir(path.join(rootfs, dir), { recursive: true });
    await chmod(path.join(rootfs, 'tmp'), 0o1777);
  }

  private async stageNode(rootfs: string, onProgress: ImageProgress): Promise<void> {
    const target = path.join(rootfs, 'usr/local/bin/node');
    await mkdir(path.dirname(target), { recursive: true });
    await copyFile(this.nodePath, target);
    await chmod(target, 0o755);
    let ldd: string;
    try {
      ldd = (await execFileAsync('ldd', [this.nodePath])).stdout;
    } catch (err) {
      // A statically linked node makes ldd exit non-zero: nothing to copy.
      ldd = (err as { stdout?: string }).stdout ?? '';
    }
    const libs = parseLddOutput(ldd);
    // Native addons (e.g. the Wasm toolchain's, when capsule itself runs on this image) also need librt,
    // which node does not link: take it from beside the libc node uses.
    const libc = libs.find((l) => path.basename(l) === 'libc.so.6');
    if (libc !== undefined) {
      const librt = path.join(path.dirname(libc), 'librt.so.1');
      if (
        !libs.includes(librt) &&
        (await stat(librt).then(
          (st) => st.isFile(),
          () => false,
        ))
      )
        libs.push(librt);
    }
    onProgress(`node image: ${this.nodePath} + ${libs.length} libraries`);
    for (const lib of libs) {
      const dest = path.join(rootfs, lib);
      await mkdir(path.dirname(dest), { recursive: true });
      await copyFile(lib, dest);
    }
  }
}

/** Names of the recipe folders present on disk, for `capsule images list`. */
export async function listRecipeFolders(runtimesDir: string = defaultRuntimesDir()): Promise<string[]> {
  const entries = await readdir(runtimesDir, { withFileTypes: true });
  return entries.filter((e) => e.isDirectory()).map((e) => e.name);
}
