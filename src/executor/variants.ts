import { chmod, cp, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { packageRoot } from '../base/package-root.js';
import { dockerSchema } from '../manifest/schema.js';
import type { Capability, Environment } from '../manifest/types.js';
import { SANDBOX_IMAGES } from '../runners/docker/image-recipes.js';

/** The JS adapter that gives a `run(input)` module the stdin/stdout contract (runtimes/js). */
export function defaultAdapterPath(): string {
  return path.join(packageRoot(), 'runtimes', 'js', 'run-module.mjs');
}

const ADAPTER_NAME = '.capsule-run-module.mjs';
const IMAGE_FOR_INTERPRETER: Partial<Record<string, string>> = {
  sh: SANDBOX_IMAGES.busybox,
  node: SANDBOX_IMAGES.node,
};

/** The sandbox image a shell capability's interpreter runs in (docker variants, `capsule learn --promote`). */
export function sandboxImageFor(interpreter: string | undefined): string | undefined {
  return interpreter === undefined ? undefined : IMAGE_FOR_INTERPRETER[interpreter];
}

export type Variant =
  | { ok: true; capability: Capability; how: string; cleanup?: () => Promise<void> }
  | { ok: false; reason: string };

function isJsModule(file: string | undefined): file is string {
  return file !== undefined && /\.(m?js)$/.test(file);
}

/** True when a JS module imports a WASI interface (`wasi:…`), which only the Wasm host provides. */
async function importsWasi(file: string): Promise<boolean> {
  const text = await readFile(file, 'utf8').catch(() => '');
  // capsule:capability/http too: its network grants are enforced by the Wasm host only.
  return /\bfrom\s*['"](wasi|capsule):|\bimport\s*\(?\s*['"](wasi|capsule):/.test(text);
}

function dockerVariant(
  capability: Capability,
  image: string,
  overrides: Partial<Capability['manifest']> = {},
): Capability {
  return {
    ...capability,
    environment: 'docker',
    manifest: {
      ...capability.manifest,
      ...overrides,
      environment: 'docker',
      docker: dockerSchema.parse({ image }),
      source: undefined,
    },
  };
}

/**
 * The capability as it would run in another environment, when it is portable there:
 * - a JS-authored wasm capability (`source` exports run(input)) runs as node on the host and in the node image,
 *   unless it imports WASI interfaces (files, environment: the Wasm host's);
 * - a shell capability interpreted by sh or node runs in the busybox or node image.
 * Anything else is not portable, with the reason.
 */
export async function deriveVariant(
  capability: Capability,
  environment: Environment,
  adapterPath: string = defaultAdapterPath(),
): Promise<Variant> {
  if (environment === capability.environment) return { ok: true, capability, how: 'as written' };
  const m = capability.manifest;

  if (capability.environment === 'wasm' && isJsModule(m.source)) {
    if (environment === 'wasm') return { ok: true, capability, how: 'as written' };
    if (m.grants.network.length > 0) {
      // On the host it would have the whole network; in docker its code speaks capsule's http interface,
      // not the proxy socket. Never a silently wider variant.
      return {
        ok: false,
        reason: `${capability.name} has grants.network, which its code reaches through the Wasm host's capsule:capability/http only`,
      };
    }
    if (await importsWasi(path.join(capability.dir, m.source))) {
      return {
        ok: false,
        reason: `${m.source} imports WASI or capsule interfaces (wasi:…, capsule:…), which only the Wasm host provides`,
      };
    }
    // Stage a copy with the adapter inside, so the docker runner's folder mount carries it too.
    const staged = await mkdtemp(path.join(tmpdir(), `capsule-variant-${capability.name}-`));
    await cp(capability.dir, staged, { recursive: true });
    await cp(adapterPath, path.join(staged, ADAPTER_NAME));
    // mkdtemp makes the folder 0700; the container's non-root user must be able to read it.
    await chmod(staged, 0o755);
    const overrides = { entry: ADAPTER_NAME, interpreter: 'node' as const, args: [m.source] };
    const base: Capability = { ...capability, dir: staged, entryPath: path.join(staged, ADAPTER_NAME) };
    const cleanup = (): Promise<void> => rm(staged, { recursive: true, force: true });
    if (environment === 'shell') {
      return {
        ok: true,
        how: `node on the host running ${m.source}`,
        cleanup,
        capability: {
          ...base,
          environment: 'shell',
          manifest: { ...m, ...overrides, environment: 'shell', source: undefined },
        },
      };
    }
    return {
      ok: true,
      how: `node in ${SANDBOX_IMAGES.node} running ${m.source}`,
      cleanup,
      capability: dockerVariant(base, SANDBOX_IMAGES.node, overrides),
    };
  }

  if (capability.environment === 'shell' && environment === 'docker') {
    const image = sandboxImageFor(m.interpreter);
    if (image === undefined) {
      return {
        ok: false,
        reason: `a shell capability run by ${m.interpreter ?? 'its own entry'} has no matching sandbox image (sh → ${SANDBOX_IMAGES.busybox}, node → ${SANDBOX_IMAGES.node})`,
      };
    }
    return {
      ok: true,
      capability: dockerVariant(capability, image),
      how: `${m.interpreter ?? ''} in ${image}`,
    };
  }

  if (environment === 'wasm') {
    return {
      ok: false,
      reason: `only capabilities authored as a JavaScript module (wasm with "source") run in wasm; "${capability.name}" is ${capability.environment}`,
    };
  }
  return {
    ok: false,
    reason: `a ${capability.environment} capability without a JavaScript "source" module cannot run in ${environment}`,
  };
}
