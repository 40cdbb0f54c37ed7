import type { Manifest } from './schema.js';
import type { ENVIRONMENTS } from '../project/environments.js';

export type Environment = (typeof ENVIRONMENTS)[number];

export interface ResolvedFsGrant {
  /** The path as written in the manifest. */
  declared: string;
  /** Absolute real path on the host (symlinks resolved, inside the project root). */
  hostPath: string;
  mode: 'ro' | 'rw';
}

/** A capability that passed validation: manifest plus everything resolved on disk. */
export interface Capability {
  name: string;
  environment: Environment;
  manifest: Manifest;
  /** Absolute real path of the capability folder. */
  dir: string;
  /** Absolute path of capability.json. */
  manifestPath: string;
  /** Absolute real path of the entry file (inside `dir`). */
  entryPath: string;
  /** `sha256:<hex>` over the manifest and every file in the folder. Grants are bound to it. */
  contentHash: string;
  /** The capability root it was found under. */
  root: string;
  fsGrants: ResolvedFsGrant[];
}

/** A capability folder that failed validation, with where and why. */
export interface InvalidCapability {
  /** Folder name (not trusted as a capability name). */
  folder: string;
  dir: string;
  issues: Array<{ file: string; field?: string | undefined; message: string }>;
}
