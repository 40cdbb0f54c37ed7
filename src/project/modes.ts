/**
 * The permission modes; see docs/permissions.md for the mode × kind table. Apart from the capsule.json
 * schema so the CLI can offer them as `--mode` choices without loading zod.
 */
export const PERMISSION_MODES = ['default', 'plan', 'edit', 'bypass'] as const;
export type PermissionMode = (typeof PERMISSION_MODES)[number];
