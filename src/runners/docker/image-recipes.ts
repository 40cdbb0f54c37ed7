// The images capsule builds, apart from the builder so the CLI can name them in its help cheaply.
/** An image capsule knows how to build offline from `runtimes/docker/<folder>/`. */
export interface ImageRecipe {
  tag: string;
  /** Folder under runtimes/docker holding the Dockerfile. */
  folder: string;
  /** Also stage the host's node binary and its shared libraries. */
  withNode: boolean;
}

/** The sandbox images by short name: the one place their tags are written. */
export const SANDBOX_IMAGES = {
  busybox: 'capsule/busybox:1',
  node: 'capsule/node:1',
} as const;

export const IMAGE_RECIPES: readonly ImageRecipe[] = [
  { tag: SANDBOX_IMAGES.busybox, folder: 'busybox', withNode: false },
  { tag: SANDBOX_IMAGES.node, folder: 'node', withNode: true },
];
