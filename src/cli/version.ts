/** capsule's version, as `--version` and the MCP server's handshake report it. */
export const VERSION = '0.1.0';
