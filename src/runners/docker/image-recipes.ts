// The images capsule builds, apart from the builder so the CLI can name them in its help cheaply.
/** An image capsule knows how to build offline from `runtimes/docker/<folder>/`. */
export interface ImageRecipe {
  tag: string;
  /** Folder under runtimes/docker holding the Dockerfile. */
  folder: string;
  /** Also stage the host's node binary and its shared libraries. */
  withNode: boolean;
}

export const IMAGE_RECIPES: readonly ImageRecipe[] = [
  { tag: 'capsule/busybox:1', folder: 'busybox', withNode: false },
  { tag: 'capsule/node:1', folder: 'node', withNode: true },
];
