// Constants of the manifest format that the CLI needs before any schema is built (argument checks,
// help text): kept apart from schema.ts so reading them does not load zod.
export const MANIFEST_FILE = 'capability.json';
export const ENVIRONMENTS = ['shell', 'wasm', 'docker'] as const;
