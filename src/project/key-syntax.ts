/*
 * The syntax of keys and rules (docs/permissions.md), in one place for the parsers in permissions/ and
 * the capsule.json schema. A leaf: it imports nothing, so capsule.json's schema can use it without pulling the gate in.
 */

/** A capability's name: it becomes a folder name, a permission key and a container label. */
export const CAPABILITY_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** A tool name: lower case, digits and `_` (`run_command`, `write_file`). */
const TOOL = '[a-z][a-z0-9_]*';

export const TOOL_NAME = new RegExp(`^${TOOL}$`);
/** `tool:action`; the action is free text (everything after the first `:`). */
export const KEY_SYNTAX = new RegExp(`^${TOOL}:[\\s\\S]+$`);
/** `Tool` or `Tool(glob)`; group 1 is the tool, group 2 the glob. */
export const RULE_SYNTAX = new RegExp(`^(${TOOL})(?:\\(([\\s\\S]*)\\))?$`);
